// `example`: the complete example of docs/experiments.md. A two-layer encoder learns associative
// recall (key/value pairs, then a query: answer its value). The quick preset (4 pairs, chance 1/8)
// passes the plateau near val_acc 0.4 within its 5000 steps, about half a minute on 2 cores.
#include "attnlab.hpp"
#include "experiments/models/models.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/loss.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

// Every key the experiment reads, with its default and help (config.toml shows them).
Schema example_schema() {
  Schema s;
  add_task_keys(s, "recall");                                        // task.*
  add_model_keys(s, {.attention = "mha(heads=2)", .d_model = 32, .layers = 1, .ffn_hidden = 64});
  add_train_keys(s, {.steps = 200, .batch_size = 32, .lr = 3e-3, .warmup = 10, .eval_every = 50});
  s.add("example.min_accuracy", 0.0, "fail the run when the final val_acc is below this");
  return s;
}

void run_example(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();  // built from task.*: train/val/test splits
  auto model = build_classifier(config, task);
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);

  Trainer trainer(ctx, *model);     // AdamW + warmup-cosine, checkpoints, progress, resume
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t /*step*/) {
    data::Batch b = loader.next();
    return nn::cross_entropy(model->forward(b.inputs), b.targets);  // (B, C) logits vs (B) labels
  };
  trainer.evaluate = [&](int64_t /*step*/) {
    return std::map<std::string, double>{{"val_acc", evaluate_classifier(*model, task, task.val).accuracy}};
  };
  if (!trainer.fit()) return;       // stopped by a signal: a checkpoint is saved, exit status 3

  const double val_acc = evaluate_classifier(*model, task, task.val).accuracy;
  if (val_acc < config.get_float("example.min_accuracy"))
    fail<ValueError>("example: val_acc {:.3f} is below example.min_accuracy {}", val_acc,
                     config.get_float("example.min_accuracy"));
  ctx.summary("val_acc", val_acc);
  ctx.summary("chance", 1.0 / double(task.num_classes));  // what guessing scores
  ctx.summary("test_acc", evaluate_classifier(*model, task, task.test).accuracy);
  ctx.summary("steps_per_s", trainer.steps_per_second());
}

// The registration line: `attnlab run example --preset quick`.
const bool registered = register_experiment({
    .name = "example",
    .description = "the docs/experiments.md example: a tiny encoder on associative recall",
    .schema = example_schema(),
    .presets = {{"quick", "task.num_pairs = 4\ntask.num_keys = 8\ntask.num_values = 8\ntask.train_size = 20000\n"
                          "model.attention = \"mha(heads=4)\"\nmodel.d_model = 64\nmodel.layers = 2\n"
                          "model.ffn_hidden = 128\ntrain.steps = 5000\ntrain.warmup = 250\ntrain.eval_every = 1000\n"},
                {"full", "train.steps = 2000\ntask.train_size = 20000\nmodel.layers = 2\n"}},
    .run = run_example,
    .check = check_model,  // the attention spec and model shapes, before the run directory exists
});

}  // namespace
}  // namespace attnlab::catalog

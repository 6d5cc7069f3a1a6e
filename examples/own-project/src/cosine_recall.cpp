// `cosine_recall`: an experiment of this project. A one-layer encoder with model.attention
// (default: this project's `cosine` variant) learns associative recall; `own run cosine_recall
// --preset quick` trains it in seconds, `own sweep sweeps/cosine_vs_mha.toml` compares it with mha.
#include <attnlab/runner.hpp>

namespace own {

using namespace attnlab;
using namespace attnlab::runner;

Schema cosine_recall_schema() {
  Schema s;
  add_task_keys(s, "recall");  // task.*
  models::add_model_keys(s, {.attention = "cosine(heads=2)", .d_model = 32, .layers = 1, .ffn_hidden = 64});
  add_train_keys(s, {.steps = 200, .batch_size = 32, .lr = 3e-3, .warmup = 10, .eval_every = 50});
  return s;
}

void run_cosine_recall(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  auto model = models::build_classifier(config, task);
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);
  Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t) {
    data::Batch b = loader.next();
    return nn::cross_entropy(model->forward(b.inputs), b.targets);  // (B, C) logits vs (B) labels
  };
  trainer.evaluate = [&](int64_t) {
    return std::map<std::string, double>{{"val_acc", models::evaluate_classifier(*model, task, task.val).accuracy}};
  };
  if (!trainer.fit()) return;  // stopped by a signal: checkpoint saved
  ctx.summary("val_acc", models::evaluate_classifier(*model, task, task.val).accuracy);
  ctx.summary("test_acc", models::evaluate_classifier(*model, task, task.test).accuracy);
  ctx.summary("steps_per_s", trainer.steps_per_second());
}

const bool registered = register_experiment({
    .name = "cosine_recall",
    .description = "examples/own-project: a tiny encoder with cosine attention on associative recall",
    .schema = cosine_recall_schema(),
    .presets = {{"quick", "task.num_pairs = 4\ntask.num_keys = 8\ntask.num_values = 8\ntrain.steps = 300\n"},
                {"tiny", "task.num_pairs = 2\ntask.num_keys = 4\ntask.num_values = 4\ntask.train_size = 256\n"
                         "task.val_size = 64\ntask.test_size = 64\ntrain.steps = 10\ntrain.eval_every = 5\n"}},
    .run = run_cosine_recall,
});

}  // namespace own

// `classify`: an encoder classifier with any attention spec (model.attention) on any
// classification task (listops, fashion_mnist, recall), trained by the Trainer.
// Metrics: train_loss and lr every train.log_every steps, val_acc / val_loss at each evaluation;
// summary: val_acc, test_acc, train_loss, steps_per_s, peak_rss_mb, params.
#include "attnlab.hpp"
#include "experiments/models/models.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/attention/costs.hpp"
#include "nn/loss.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

Schema classify_schema() {
  Schema s;
  add_task_keys(s, "listops");
  add_model_keys(s);
  add_train_keys(s, {.steps = 300, .batch_size = 32, .lr = 1e-3, .warmup = 30, .eval_every = 100});
  return s;
}

void run_classify(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  auto model = build_classifier(config, task);
  ctx.logf("classify: {} on {} ({} parameters)", attention_spec(config), task.name,
           model->num_parameters());
  data::DataLoader loader(task.train, config.get_int("train.batch_size"), /*shuffle=*/true,
                          uint64_t(config.get_int("seed")), /*drop_last=*/true);
  Trainer trainer(ctx, *model);
  trainer.add_loader("train", loader);
  trainer.loss = [&](int64_t) {
    data::Batch b = loader.next();  // the global batch; this micro-batch's rows below
    Tensor x = trainer.micro_batch(b.inputs), y = trainer.micro_batch(b.targets);
    Tensor logits = model->forward(x, task.padding_mask(x));  // (B / parts, C)
    return nn::cross_entropy(logits, y);
  };
  trainer.evaluate = [&](int64_t) {
    Scores s = evaluate_classifier(*model, task, task.val);
    return std::map<std::string, double>{{"val_acc", s.accuracy}, {"val_loss", s.loss}};
  };
  if (!trainer.fit()) return;  // stopped: the checkpoint is saved
  Scores val = evaluate_classifier(*model, task, task.val), test = evaluate_classifier(*model, task, task.test);
  ctx.summary("val_acc", val.accuracy);
  ctx.summary("test_acc", test.accuracy);
  ctx.summary("train_loss", trainer.last_train_loss());
  ctx.summary("steps_per_s", trainer.steps_per_second());
  ctx.summary("peak_rss_mb", peak_rss_mb());
  ctx.summary("params", double(model->num_parameters()));
  // A variant whose pattern restricts the pairs records its density at the task's N, so that a
  // report marks it when it is dense there (docs/experiments.md, "Claims and verdicts").
  nn::Attention& attention = *model->blocks->at<nn::TransformerBlock>(0)->attn;
  if (nn::attention_restricts_pairs(attention)) ctx.summary("density", nn::attention_density(attention, task.seq_len));
}

const bool registered = register_experiment({
    .name = "classify",
    .description = "encoder classifier with model.attention on a classification task (val_acc, test_acc)",
    .schema = classify_schema(),
    .presets = {{"quick", "task.name = \"listops\"\ntask.train_size = 2000\ntrain.steps = 300\n"},
                {"full",
                 "task.name = \"listops\"\ntask.train_size = 20000\ntask.val_size = 2000\ntask.test_size = 2000\n"
                 "task.length = 256\nmodel.d_model = 128\nmodel.ffn_hidden = 256\ntrain.steps = 5000\n"
                 "train.batch_size = 32\ntrain.warmup = 200\ntrain.eval_every = 500\ntrain.checkpoint_every = 500\n"}},
    .run = run_classify,
    .check = check_model,
});

}  // namespace
}  // namespace attnlab::catalog

// `lm`: a causal character LM (nn::CausalLM with model.attention) on the fortunes corpus, trained
// by the Trainer on random windows drawn from ctx.generator().
// Metrics: train_loss, lr; val_bpc (bits per character on fixed validation windows) at each
// evaluation; summary: val_bpc, steps_per_s, peak_rss_mb, params.
#include <cmath>

#include "attnlab.hpp"
#include "experiments/catalog/models.hpp"
#include "experiments/data/text.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/loss.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;

Schema lm_schema() {
  Schema s;
  add_task_keys(s, "fortunes");
  add_model_keys(s, {.attention = "mha(heads=4)", .d_model = 128, .layers = 2, .ffn_hidden = 512});
  add_train_keys(s, {.steps = 300, .batch_size = 16, .lr = 2e-3, .warmup = 30, .eval_every = 100});
  s.add("eval.batches", int64_t(8), "validation batches (of train.batch_size windows) per evaluation");
  return s;
}

void run_lm(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  auto model = build_lm(config, task);
  const int64_t batch = config.get_int("train.batch_size"), n = task.seq_len;
  ctx.logf("lm: {} on {} ({} parameters, context {})", attention_spec(config), task.name,
           model->num_parameters(), n);
  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    Tensor logits = model->forward(x);  // (B, N, V)
    return nn::cross_entropy(reshape(logits, {-1, task.vocab_size}), reshape(y, {-1}));
  };
  auto val_bpc = [&] {
    Generator fixed(12345);  // the same validation windows at every evaluation
    double sum = 0;
    const int64_t k = std::max<int64_t>(1, config.get_int("eval.batches"));
    for (int64_t i = 0; i < k; ++i) {
      auto [x, y] = data::lm_batch(task.val_tokens, batch, n, fixed);  // (B, N), (B, N)
      sum += loss_of(x, y).item();
    }
    return sum / double(k) / std::log(2.0);
  };
  Trainer trainer(ctx, *model);
  trainer.loss = [&](int64_t) {
    auto [x, y] = data::lm_batch(task.train_tokens, batch, n, ctx.generator());  // (B, N), (B, N)
    return loss_of(x, y);
  };
  trainer.evaluate = [&](int64_t) { return std::map<std::string, double>{{"val_bpc", val_bpc()}}; };
  if (!trainer.fit()) return;
  double bpc;
  {
    NoGradGuard no_grad;
    model->eval();
    bpc = val_bpc();
  }
  ctx.summary("val_bpc", bpc);
  ctx.summary("steps_per_s", trainer.steps_per_second());
  ctx.summary("peak_rss_mb", peak_rss_mb());
  ctx.summary("params", double(model->num_parameters()));
}

const bool registered = register_experiment({
    .name = "lm",
    .description = "causal character LM with model.attention on fortunes (val_bpc)",
    .schema = lm_schema(),
    .presets = {{"quick", "train.steps = 300\n"},
                {"full", "train.steps = 3500\ntrain.batch_size = 32\ntrain.warmup = 200\ntrain.eval_every = 500\n"
                         "train.checkpoint_every = 500\n"}},
    .run = run_lm,
});

}  // namespace
}  // namespace attnlab::catalog

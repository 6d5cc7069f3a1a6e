// `lm`: a causal character LM (nn::CausalLM with model.attention, positions model.positions) on
// the fortunes corpus, trained by the Trainer on random windows drawn from ctx.generator(), or
// with task.pack on rows packed with whole fortunes and their segment ids.
// Metrics: train_loss, lr; val_bpc (bits per character on fixed validation windows of the
// training context) at each evaluation; summary: val_bpc, steps_per_s, peak_rss_mb, params, and
// with eval.context > 0 also val_bpc_long and eval_context: the final val_bpc on windows of
// eval.context tokens (length extrapolation; docs/experiments.md); with eval.ngram also
// ngram_bpc_3, _4, _5: the validation bits per character of interpolated Kneser-Ney 3-, 4- and
// 5-gram models counted on the run's training text (experiments/analysis/ngram.hpp), the
// calibration `val_bpc` is read against (docs/experiments.md, "Where a char LM stands: the n-gram
// calibration"). train.precision = bf16 runs the matrix products of training and evaluation under
// autocast (autograd/autocast.hpp).
#include <fmt/ranges.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "attnlab.hpp"
#include "experiments/analysis/ngram.hpp"
#include "experiments/models/models.hpp"
#include "experiments/data/text.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/kernels/tile_gemm_bf16.hpp"
#include "nn/loss.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;
using namespace models;

Schema lm_schema() {
  Schema s;
  add_task_keys(s, "fortunes");
  add_model_keys(s, {.attention = "mha(heads=4)", .d_model = 128, .layers = 2, .ffn_hidden = 512});
  s.add("task.pack", false,
        "true: train on rows packed with whole fortunes and their segment ids (each token attends its own "
        "fortune; learned positions restart per fortune) instead of random windows; val_bpc uses the same "
        "windows either way");
  s.add("model.positions", "learned",
        "learned (pos_emb of task.length rows) | none (token order from the attention alone, e.g. mha(alibi=true))");
  add_train_keys(s, {.steps = 300, .batch_size = 16, .lr = 2e-3, .warmup = 30, .eval_every = 100});
  add_precision_key(s);
  s.add("eval.batches", int64_t(8), "validation batches (of train.batch_size windows) per evaluation");
  s.bound("eval.batches", 1, 100'000);
  s.add("eval.context", int64_t(0),
        "> 0: the final evaluation also reports val_bpc_long on windows of this many tokens (0 = off)");
  s.bound("eval.context", 0, 1 << 20);
  s.add("eval.ngram", false,
        "true: before training, count 1..5-grams of the training text and report ngram_bpc_3, _4, _5 (the "
        "Kneser-Ney n-gram calibration of the split; about 0.5 s and 60 MB, which peak_rss_mb then includes)");
  return s;
}

// eval.context against the config alone: >= 0, and with learned positions no longer than the
// table (`table_rows`, the context; 0 = not known yet): positions past it were never trained.
void check_eval_context(const Config& config, int64_t table_rows) {
  const int64_t n = config.get_int("eval.context");
  const std::string from = config.origin("eval.context");
  if (n < 0) fail<ConfigError>("eval.context must be >= 0 (0 = off), got {} (from {})", n, from);
  if (n > 0 && table_rows > 0 && config.get_string("model.positions") == "learned" && n > table_rows)
    fail<ConfigError>("eval.context = {} (from {}) exceeds the learned position table of task.length = {} rows; "
                      "use model.positions = none with a positional attention (e.g. mha(alibi=true)) or "
                      "eval.context <= {}",
                      n, from, table_rows, table_rows);
}

// The experiment's check, before the run directory is created: the model, and eval.context
// (against the position table when task.length gives the context; 0 leaves it to the task).
void check_lm(const Config& config) {
  check_model(config);
  resolve_precision(config);
  check_eval_context(config, std::max<int64_t>(0, config.get_int("task.length")));
}

// eval.context, checked again with the task loaded: also within the validation text.
int64_t eval_context(const Config& config, const TaskData& task) {
  check_eval_context(config, task.seq_len);
  const int64_t n = config.get_int("eval.context");
  const std::string from = config.origin("eval.context");
  if (n >= task.val_tokens.numel())
    fail<ConfigError>("eval.context = {} (from {}) needs more than the {} validation tokens", n, from,
                      task.val_tokens.numel());
  return n;
}

// task.pack needs an attention that takes segment ids (retention and fnet do not). Asked of the
// model before the first step, so that the run and its dry run refuse it alike: one forward of
// one row in eval mode, without gradient, with the default generator and every generator of the
// model restored afterwards (the run draws the same numbers as without the probe).
void check_takes_segments(nn::CausalLM& model, int64_t n) {
  NoGradGuard no_grad;
  std::vector<std::tuple<Generator*, uint64_t, uint64_t>> kept{
      {&default_generator(), default_generator().seed(), default_generator().offset()}};
  for (auto& [name, g] : model.named_generators()) kept.emplace_back(g, g->seed(), g->offset());
  model.eval();
  const Tensor row = zeros({1, n}, kInt64);  // (1, N): token 0, one segment
  model.forward(row, row);
  model.train();
  for (const auto& [g, seed, offset] : kept) g->set_state(seed, offset);
}

void run_lm(const Config& config, RunContext& ctx) {
  const TaskData& task = ctx.data();
  auto model = build_lm(config, task);
  const int64_t batch = config.get_int("train.batch_size"), n = task.seq_len;
  const int64_t long_n = eval_context(config, task);
  const bool pack = config.get_bool("task.pack");
  ctx.logf("lm: {} on {} ({} parameters, context {}, {} positions{})", attention_spec(config), task.name,
           model->num_parameters(), n, model->config.positions, pack ? ", packed rows" : "");
  if (pack) check_takes_segments(*model, n);
  const Precision precision = resolve_precision(config);
  ctx.logf("precision: {}", precision.reason);
  if (precision.bf16) {
    AutocastGuard probe(kBFloat16, AutocastPolicy::Force);
    ctx.logf("precision: the fused attention kernel runs its products in {}",
             nn::tile_attention_runs_bf16(kFloat32)
                 ? fmt::format("bf16 (AVX512_BF16) where its query rows have {} or more keys, else float32",
                               nn::tile::bf16_min_keys_per_row())
                 : std::string("float32 (no AVX512_BF16 on this CPU)"));
  }
  // Training and evaluation run at the same precision; a product's backward follows its forward.
  auto loss_of = [&](const Tensor& x, const Tensor& y, const Tensor& segment_ids = {}) {
    std::optional<AutocastGuard> autocast;
    if (precision.bf16) autocast.emplace(kBFloat16, AutocastPolicy::Force);
    Tensor logits = model->forward(x, segment_ids);  // (B, N, V)
    return nn::cross_entropy(reshape(logits, {-1, task.vocab_size}), reshape(y, {-1}));
  };
  // Mean bits per character over eval.batches fixed batches of `context`-token windows: the same
  // windows at every evaluation (and, at the training context, the same for val_bpc_long).
  auto val_bpc = [&](int64_t context) {
    Generator fixed(12345);
    double sum = 0;
    const int64_t k = config.get_int("eval.batches");  // in [1, 100000]: the schema's bound
    for (int64_t i = 0; i < k; ++i) {
      stop_point();  // a stop signal is honoured between batches (RunStopped)
      auto [x, y] = data::lm_batch(task.val_tokens, batch, context, fixed);  // (B, context), (B, context)
      sum += loss_of(x, y).item();
    }
    return sum / double(k) / std::log(2.0);
  };
  // Opt-in: the hash tables of the 5-gram model (about 60 MB on fortunes) would otherwise set the
  // peak_rss_mb of every small run. Computed in every process of a run, a resumed one too: the
  // figures are deterministic and the summary is written by the last process.
  if (config.get_bool("eval.ngram")) {
    const std::vector<double> ngram =
        analysis::ngram_bits_per_token(task.train_tokens, task.val_tokens, task.vocab_size, 5);
    for (int order : {3, 4, 5}) ctx.summary(fmt::format("ngram_bpc_{}", order), ngram[size_t(order - 1)]);
    ctx.logf("lm: n-gram calibration (Kneser-Ney): 3-gram {:.4f}, 4-gram {:.4f}, 5-gram {:.4f} bpc", ngram[2], ngram[3],
             ngram[4]);
  }
  Trainer trainer(ctx, *model);
  // Each call draws the global batch and computes its micro-batch's rows (Trainer::micro_batch).
  trainer.loss = [&](int64_t) {
    auto part = [&](const Tensor& t) { return trainer.micro_batch(t); };
    if (pack) {
      data::PackedBatch p = data::lm_packed_batch(task.train_tokens, task.train_docs, batch, n, ctx.generator());
      return loss_of(part(p.inputs), part(p.targets), part(p.segment_ids));  // (B / parts, N) each
    }
    auto [x, y] = data::lm_batch(task.train_tokens, batch, n, ctx.generator());  // (B, N), (B, N)
    return loss_of(part(x), part(y));
  };
  trainer.evaluate = [&](int64_t) { return std::map<std::string, double>{{"val_bpc", val_bpc(n)}}; };
  if (!trainer.fit()) return;
  NoGradGuard no_grad;
  model->eval();
  ctx.summary("val_bpc", val_bpc(n));
  if (long_n > 0) {
    const double bpc_long = val_bpc(long_n);
    ctx.logf("lm: val_bpc at context {}: {:.4f}", long_n, bpc_long);
    ctx.summary("val_bpc_long", bpc_long);
    ctx.summary("eval_context", double(long_n));
  }
  if (precision.bf16) ctx.logf("precision: bf16 products ran on oneDNN's {}", fmt::join(onednn_kernels_used(), ", "));
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
    .check = check_lm,
});

}  // namespace
}  // namespace attnlab::catalog

// `lowrank_fit`: the low-rank bottleneck of attention heads (Bhojanapalli, Yun, Rawat, Reddi,
// Kumar 2020, *Low-Rank Bottleneck in Multi-head Attention Models*, arXiv:2002.07028), and the way
// talking-heads mixing (Shazeer et al. 2020, *Talking-Heads Attention*) lifts it.
//
// N tokens with fixed random inputs X (N, D) and h heads with key size k each. Head j's logits are
//     J_j = X W_q^j^T (X W_k^j^T)^T / sqrt(k)               W_q^j, W_k^j: (k, D)
// of rank <= min(k, D). Gradient descent fits the projections so that head j's attention
// P_j = softmax_m(L_j) matches a fixed, arbitrary row-stochastic target T_j = softmax(G_j), G_j
// (N, N) with N(0, logit_scale^2) entries, one target per head. With fit.mix:
//     none:     L_j = J_j                                   rank <= k
//     talking:  L_j = sum_a J_a pre_mix[a, j]               rank <= h k,  pre_mix (h, h) learned
// Softmax ignores a constant added to a row, so P = T exactly needs a logit matrix G + c 1^T of
// rank <= its rank bound for some c (N); for a generic G the smallest such rank is N - 1. Hence
// with D >= N one head (h = 1) fits T for k >= N - 1 (error -> 0) and cannot below (the paper's
// Theorem 1 states the sufficient side as k >= N). With h heads, talking lifts each head's bound
// from k to h k, but the heads share the same h rank-k matrices J_a, so their logits lie in one
// h-dimensional span: fitting h unrelated targets needs h N^2 values from h k (2N - k) + h^2 + h N
// free ones (the J_a, pre_mix, the row constants), which falls short whenever (N - k)^2 > N + h
// (N = 8, h = 4, k = 2: 160 of 256). Talking then fits better than none, but not to zero.
// The loss is the mean over heads and rows of KL(T_j || P_j).
//
// Keys: fit.tokens N, fit.input_dim D, fit.key_size k (per head), fit.heads h (default 1),
// fit.mix none | talking (default none), fit.logit_scale, fit.data_seed (X and the targets).
// The pre_mix starts normal(0, 1/sqrt(h)), not the identity, so talking does not start as none.
//
// Metrics: train_loss (= kl) every train.log_every steps; kl and max_abs_err (max |P - T| over
// every head) at each evaluation; summary: kl, max_abs_err, kl_uniform (the KL of the uniform
// pattern, the scale of "no fit at all"), params.
#include <cmath>

#include "attnlab.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/trainer.hpp"

namespace attnlab::catalog {
namespace {

using namespace runner;

Schema lowrank_fit_schema() {
  Schema s;
  s.add("fit.tokens", int64_t(8), "N: tokens, the size of the target pattern (N, N)")
      .add("fit.input_dim", int64_t(16), "D: input size; the logits' rank is <= min(key_size, D), so D >= N "
                                         "isolates the key size")
      .add("fit.key_size", int64_t(4), "k: key/query size of each head")
      .add("fit.heads", int64_t(1), "h: heads, each fitting its own target")
      .add("fit.mix", "none", "none: head j's logits are its own (rank <= k); talking: a learned (h, h) pre_mix "
                              "combines all heads' logits (rank <= h k)")
      .add("fit.logit_scale", 2.0, "std of the targets' logits G (larger = sharper target rows)")
      .add("fit.data_seed", int64_t(0), "seed of X and the targets (independent of `seed`, which draws the weights)")
      // Lower ends 0: lowrank_fit names what it needs (>= 1) itself.
      .bound("fit.tokens", 0, 1 << 12)
      .bound("fit.input_dim", 0, 1 << 16)
      .bound("fit.key_size", 0, 1 << 16)
      .bound("fit.heads", 0, 1 << 12);
  add_train_keys(s, {.steps = 1500, .batch_size = 1, .lr = 0.05, .weight_decay = 0, .warmup = 50,
                     .min_lr_ratio = 0.01, .clip = 0, .eval_every = 500, .log_every = 50});
  return s;
}

// The heads' projections W_q, W_k (like mha's q_proj/k_proj weights, one (k, D) block per head),
// without biases: a query bias is a row constant (removed by softmax) and a key bias adds one more
// rank-1 term. With `talking`, pre_mix mixes the heads' logits before the softmax, as
// talking_heads' pre_mix does (docs/attention.md).
class LowRankHeads : public nn::Module {
 public:
  LowRankHeads(int64_t heads, int64_t key_size, int64_t input_dim, bool talking, Generator& gen)
      : key_size_(key_size) {
    const double std = 1.0 / std::sqrt(double(input_dim));
    w_q_ = register_parameter("w_q", randn({heads, key_size, input_dim}, gen, kFloat64, 0, std));  // (h, k, D)
    w_k_ = register_parameter("w_k", randn({heads, key_size, input_dim}, gen, kFloat64, 0, std));  // (h, k, D)
    // Random rather than the identity, so that the fit does not start as mix=none; the std keeps
    // a mixed logit's variance that of one head's.
    if (talking)
      pre_mix_ = register_parameter("pre_mix", randn({heads, heads}, gen, kFloat64, 0, 1.0 / std::sqrt(double(heads))));
  }
  // Log-attention of every head for inputs x (N, D).
  Tensor log_attention(const Tensor& x) const {
    Tensor q = matmul(x, transpose(w_q_, 1, 2));                                    // (h, N, k)
    Tensor k = matmul(x, transpose(w_k_, 1, 2));                                    // (h, N, k)
    Tensor logits = matmul(q, transpose(k, 1, 2)) / std::sqrt(double(key_size_));   // J: (h, N, N)
    if (pre_mix_.defined()) logits = einsum("anm,aj->jnm", {logits, pre_mix_});     // L: (h, N, N)
    return log_softmax(logits, -1);                                                 // (h, N, N)
  }

 private:
  int64_t key_size_;
  Tensor w_q_, w_k_;  // (h, k, D)
  Tensor pre_mix_;    // (h, h), undefined with mix=none
};

// Mean over heads and rows of KL(T || P), from log P; all three (h, N, N).
Tensor mean_kl(const Tensor& target, const Tensor& log_target, const Tensor& log_p) {
  return sum(target * (log_target - log_p)) / double(target.size(0) * target.size(1));  // ()
}

void run_lowrank_fit(const Config& config, RunContext& ctx) {
  const int64_t n = config.get_int("fit.tokens"), d = config.get_int("fit.input_dim"),
                k = config.get_int("fit.key_size"), h = config.get_int("fit.heads");
  const double scale = config.get_float("fit.logit_scale");
  const std::string& mix = config.get_string("fit.mix");
  for (const char* key : {"fit.tokens", "fit.input_dim", "fit.key_size", "fit.heads"})
    if (config.get_int(key) < 1)
      fail<ConfigError>("lowrank_fit: {} must be >= 1, got {} (from {})", key, config.get_int(key), config.origin(key));
  if (!(scale > 0))
    fail<ConfigError>("lowrank_fit: fit.logit_scale must be > 0, got {} (from {})", scale, config.origin("fit.logit_scale"));
  if (mix != "none" && mix != "talking")
    fail<ConfigError>("lowrank_fit: fit.mix must be none or talking, got '{}' (from {})", mix,
                      config.origin("fit.mix"));

  Generator data(uint64_t(config.get_int("fit.data_seed")));
  const Tensor x = randn({n, d}, data, kFloat64, 0, 1.0 / std::sqrt(double(d)));  // (N, D), rows of norm ~1
  const Tensor log_target = log_softmax(randn({h, n, n}, data, kFloat64, 0, scale), -1);  // (h, N, N)
  const Tensor target = exp(log_target);                                               // (h, N, N), rows sum to 1
  const Tensor log_uniform = full({h, n, n}, -std::log(double(n)), kFloat64);          // (h, N, N)
  const double kl_uniform = mean_kl(target, log_target, log_uniform).item();

  LowRankHeads heads(h, k, d, mix == "talking", ctx.generator());
  ctx.logf("lowrank_fit: N = {}, D = {}, key_size = {}, heads = {}, mix = {}; KL of the uniform pattern {:.4f}", n,
           d, k, h, mix, kl_uniform);
  auto errors = [&] {
    Tensor log_p = heads.log_attention(x);  // (h, N, N)
    return std::map<std::string, double>{{"kl", mean_kl(target, log_target, log_p).item()},
                                         {"max_abs_err", max(abs(exp(log_p) - target)).item()}};
  };
  Trainer trainer(ctx, heads);
  trainer.loss = [&](int64_t) { return mean_kl(target, log_target, heads.log_attention(x)); };
  trainer.evaluate = [&](int64_t) { return errors(); };
  if (!trainer.fit()) return;
  std::map<std::string, double> final_errors;
  {
    NoGradGuard no_grad;
    final_errors = errors();
  }
  for (const auto& [name, value] : final_errors) ctx.summary(name, value);
  ctx.summary("kl_uniform", kl_uniform);
  ctx.summary("params", double(heads.num_parameters()));
}

const bool registered = register_experiment({
    .name = "lowrank_fit",
    .description = "h heads fit arbitrary N x N attention patterns: impossible below key_size N - 1 without a "
                   "talking-heads mix (kl, max_abs_err)",
    .schema = lowrank_fit_schema(),
    .presets = {{"quick", "fit.tokens = 8\nfit.input_dim = 16\ntrain.steps = 1500\n"},
                {"full", "fit.tokens = 32\nfit.input_dim = 64\ntrain.steps = 6000\ntrain.eval_every = 1000\n"}},
    .run = run_lowrank_fit,
});

}  // namespace
}  // namespace attnlab::catalog

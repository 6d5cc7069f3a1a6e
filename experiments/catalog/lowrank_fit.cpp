// `lowrank_fit`: the low-rank bottleneck of one attention head (Bhojanapalli, Yun, Rawat, Reddi,
// Kumar 2020, *Low-Rank Bottleneck in Multi-head Attention Models*, arXiv:2002.07028).
//
// N tokens with fixed random inputs X (N, D) and one head with key size k: the attention is
//     P = softmax_m(X W_q^T (X W_k^T)^T / sqrt(k))          W_q, W_k: (k, D)
// whose logit matrix has rank <= min(k, D). Gradient descent fits W_q, W_k so that P matches a
// fixed, arbitrary row-stochastic target T = softmax(G), G (N, N) with N(0, logit_scale^2)
// entries. Softmax ignores a constant added to a row, so P = T exactly needs a logit matrix
// G + c 1^T of rank <= k for some c (N); for a generic G the smallest such rank is N - 1. Hence
// with D >= N: k >= N - 1 fits T (error -> 0), k < N - 1 cannot (the paper's Theorem 1 states the
// sufficient side as k >= N). The loss is the mean over rows of KL(T || P).
//
// Metrics: train_loss (= kl) every train.log_every steps; kl and max_abs_err (max |P - T|) at
// each evaluation; summary: kl, max_abs_err, kl_uniform (the KL of the uniform pattern, the
// scale of "no fit at all"), params.
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
      .add("fit.key_size", int64_t(4), "k: key/query size of the head")
      .add("fit.logit_scale", 2.0, "std of the target's logits G (larger = sharper target rows)")
      .add("fit.data_seed", int64_t(0), "seed of X and the target (independent of `seed`, which draws W_q, W_k)");
  add_train_keys(s, {.steps = 1500, .batch_size = 1, .lr = 0.05, .weight_decay = 0, .warmup = 50,
                     .min_lr_ratio = 0.01, .clip = 0, .eval_every = 500, .log_every = 50});
  return s;
}

// The head's two projections W_q, W_k (like mha's q_proj/k_proj weights), without biases: a query bias
// is a row constant (removed by softmax) and a key bias adds one more rank-1 term.
class LowRankHead : public nn::Module {
 public:
  LowRankHead(int64_t key_size, int64_t input_dim, Generator& gen) : key_size_(key_size) {
    const double std = 1.0 / std::sqrt(double(input_dim));
    w_q_ = register_parameter("w_q", randn({key_size, input_dim}, gen, kFloat64, 0, std));  // (k, D)
    w_k_ = register_parameter("w_k", randn({key_size, input_dim}, gen, kFloat64, 0, std));  // (k, D)
  }
  // Log-attention of inputs x (N, D).
  Tensor log_attention(const Tensor& x) const {
    Tensor q = matmul(x, transpose(w_q_, 0, 1));                                          // (N, k)
    Tensor k = matmul(x, transpose(w_k_, 0, 1));                                          // (N, k)
    Tensor logits = matmul(q, transpose(k, 0, 1)) / std::sqrt(double(key_size_));         // (N, N)
    return log_softmax(logits, -1);                                                       // (N, N)
  }

 private:
  int64_t key_size_;
  Tensor w_q_, w_k_;
};

// Mean over rows of KL(T || P), from log P.
Tensor mean_kl(const Tensor& target, const Tensor& log_target, const Tensor& log_p) {
  return sum(target * (log_target - log_p)) / double(target.size(0));  // ()
}

void run_lowrank_fit(const Config& config, RunContext& ctx) {
  const int64_t n = config.get_int("fit.tokens"), d = config.get_int("fit.input_dim"),
                k = config.get_int("fit.key_size");
  const double scale = config.get_float("fit.logit_scale");
  for (const char* key : {"fit.tokens", "fit.input_dim", "fit.key_size"})
    if (config.get_int(key) < 1)
      fail<ConfigError>("lowrank_fit: {} must be >= 1, got {} (from {})", key, config.get_int(key), config.origin(key));
  if (!(scale > 0))
    fail<ConfigError>("lowrank_fit: fit.logit_scale must be > 0, got {} (from {})", scale, config.origin("fit.logit_scale"));

  Generator data(uint64_t(config.get_int("fit.data_seed")));
  const Tensor x = randn({n, d}, data, kFloat64, 0, 1.0 / std::sqrt(double(d)));  // (N, D), rows of norm ~1
  const Tensor log_target = log_softmax(randn({n, n}, data, kFloat64, 0, scale), -1);  // (N, N)
  const Tensor target = exp(log_target);                                            // (N, N), rows sum to 1
  const Tensor log_uniform = full({n, n}, -std::log(double(n)), kFloat64);          // (N, N)
  const double kl_uniform = mean_kl(target, log_target, log_uniform).item();

  LowRankHead head(k, d, ctx.generator());
  ctx.logf("lowrank_fit: N = {}, D = {}, key_size = {}; KL of the uniform pattern {:.4f}", n, d, k, kl_uniform);
  auto errors = [&] {
    Tensor log_p = head.log_attention(x);  // (N, N)
    return std::map<std::string, double>{{"kl", mean_kl(target, log_target, log_p).item()},
                                         {"max_abs_err", max(abs(exp(log_p) - target)).item()}};
  };
  Trainer trainer(ctx, head);
  trainer.loss = [&](int64_t) { return mean_kl(target, log_target, head.log_attention(x)); };
  trainer.evaluate = [&](int64_t) { return errors(); };
  if (!trainer.fit()) return;
  std::map<std::string, double> final_errors;
  {
    NoGradGuard no_grad;
    final_errors = errors();
  }
  for (const auto& [name, value] : final_errors) ctx.summary(name, value);
  ctx.summary("kl_uniform", kl_uniform);
  ctx.summary("params", double(head.num_parameters()));
}

const bool registered = register_experiment({
    .name = "lowrank_fit",
    .description = "one head fits an arbitrary N x N attention pattern: impossible below key_size N - 1 (kl, max_abs_err)",
    .schema = lowrank_fit_schema(),
    .presets = {{"quick", "fit.tokens = 8\nfit.input_dim = 16\ntrain.steps = 1500\n"},
                {"full", "fit.tokens = 32\nfit.input_dim = 64\ntrain.steps = 6000\ntrain.eval_every = 1000\n"}},
    .run = run_lowrank_fit,
});

}  // namespace
}  // namespace attnlab::catalog

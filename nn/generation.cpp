#include "nn/generation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"

namespace attnlab::nn {
namespace {

// sample_next's body; `where` starts its errors ("sample_next", or generate's step).
Tensor sample_rows(const Tensor& logits, double temperature, int64_t top_k, Generator& gen, const std::string& where) {
  if (logits.dim() != 2) fail<ShapeError>("{}: logits must be (B, V), got {}", where, to_string(logits.shape()));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail<ValueError>("{}: temperature must be >= 0, got {}", where, temperature);
  if (top_k < 0) fail<ValueError>("{}: top_k must be >= 0, got {}", where, top_k);
  const int64_t B = logits.size(0), V = logits.size(1);
  const std::vector<double> l = to(contiguous(logits), kFloat64).to_vector<double>();
  // A NaN would break the sort's ordering and an infinity the softmax: neither samples anything.
  for (int64_t i = 0; i < B * V; ++i)
    if (!std::isfinite(l[size_t(i)]))
      fail<ValueError>("{}: the logit of token {} in row {} is {}; the model's output is not finite (check the "
                       "checkpoint's weights)",
                       where, i % V, i / V, l[size_t(i)]);
  std::vector<int64_t> out(B);
  std::vector<int64_t> order(V);
  std::vector<double> p(V);
  for (int64_t b = 0; b < B; ++b) {
    const double* row = l.data() + b * V;
    // Draw even when greedy, so that every path consumes the generator alike.
    const double u = double(gen.next_u64() >> 11) * 0x1.0p-53;  // [0, 1)
    std::iota(order.begin(), order.end(), 0);
    // Most likely first; ties by the lower id, so the order is deterministic.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return row[a] > row[c]; });
    if (temperature == 0) {
      out[b] = order[0];
      continue;
    }
    const int64_t k = top_k > 0 ? std::min(top_k, V) : V;
    const double mx = row[order[0]];
    double total = 0;
    for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((row[order[i]] - mx) / temperature);
    double acc = 0;
    out[b] = order[k - 1];  // if rounding leaves u * total beyond the last partial sum
    for (int64_t i = 0; i < k; ++i)
      if ((acc += p[i]) > u * total) {
        out[b] = order[i];
        break;
      }
  }
  return from_vector(out, {B});
}

}  // namespace

Tensor sample_next(const Tensor& logits, double temperature, int64_t top_k, Generator& gen) {
  return sample_rows(logits, temperature, top_k, gen, "sample_next");
}

Tensor generate(CausalLM& model, const Tensor& prompt, const GenerateOptions& o) {
  if (prompt.dtype() != kInt64 || prompt.dim() != 2 || prompt.size(1) < 1)
    fail<ShapeError>("generate: prompt must be int64 (B, P) with P >= 1, got {} {}", dtype_name(prompt.dtype()),
                     to_string(prompt.shape()));
  if (o.max_new_tokens < 0) fail<ValueError>("generate: max_new_tokens must be >= 0, got {}", o.max_new_tokens);
  const int64_t B = prompt.size(0), P = prompt.size(1), total = P + o.max_new_tokens;
  if (model.learned_positions() && total > model.config.max_len)
    fail<ValueError>("generate: prompt ({}) + max_new_tokens ({}) = {} exceeds the model's max_len {}", P,
                     o.max_new_tokens, total, model.config.max_len);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Generator gen(o.seed);
  Tensor tokens = prompt;  // (B, t)
  LMCache cache;
  if (o.use_cache) cache = model.make_cache(B);
  Tensor next_in = prompt;  // what the cache has not seen yet
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    Tensor logits = o.use_cache ? model.forward_step(next_in, cache) : model.forward(tokens);  // (B, T, V)
    Tensor last = select(logits, 1, logits.size(1) - 1);                                          // (B, V)
    const std::string where = fmt::format("generate: step {} of {} (position {})", step + 1, o.max_new_tokens, P + step);
    Tensor next = reshape(sample_rows(last, o.temperature, o.top_k, gen, where), {B, 1});
    tokens = cat({tokens, next}, 1);
    next_in = next;
  }
  model.train(was_training);
  return tokens;
}

}  // namespace attnlab::nn

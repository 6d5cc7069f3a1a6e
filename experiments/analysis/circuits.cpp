// Previous-token and induction scores on repeated random sequences (see circuits.hpp).
#include "experiments/analysis/circuits.hpp"

#include <numeric>

#include "autograd/ops.hpp"

namespace attnlab::analysis {

Tensor repeated_random_tokens(int64_t batch, int64_t half, int64_t vocab, int64_t pad_id, Generator& gen) {
  if (batch < 1 || half < 2)
    fail<ValueError>("repeated_random_tokens: batch must be >= 1 and half >= 2, got batch={} half={}", batch, half);
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < vocab; ++t)
    if (t != pad_id) ids.push_back(t);
  if (ids.size() < 2)
    fail<ValueError>("repeated_random_tokens: vocab={} with pad_id={} leaves {} usable ids, need >= 2", vocab, pad_id,
                     ids.size());
  const bool distinct = int64_t(ids.size()) >= half;
  std::vector<int64_t> out(size_t(batch * 2 * half));
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t> pool = ids;
    for (int64_t j = 0; j < half; ++j) {
      // A partial Fisher-Yates shuffle draws distinct ids; with a small vocabulary, any id.
      const size_t lo = distinct ? size_t(j) : 0;
      const size_t pick = lo + size_t(gen.next_u64() % uint64_t(pool.size() - lo));
      if (distinct) std::swap(pool[size_t(j)], pool[pick]);
      const int64_t t = distinct ? pool[size_t(j)] : pool[pick];
      out[size_t(b * 2 * half + j)] = out[size_t(b * 2 * half + half + j)] = t;
    }
  }
  return from_vector(out, {batch, 2 * half});
}

CircuitStats circuit_scores(const std::vector<Tensor>& maps, const Tensor& axis_tokens, int64_t half, bool causal) {
  if (axis_tokens.dim() != 2)
    fail<ShapeError>("circuit_scores: axis tokens must be (B, N), got {}", to_string(axis_tokens.shape()));
  const int64_t B = axis_tokens.size(0), N = axis_tokens.size(1);
  const std::vector<int64_t> tok = contiguous(axis_tokens).to_vector<int64_t>();
  CircuitStats c;
  c.half = half;
  c.examples = B;
  // The first token position of each row (after a CLS, whose axis token is negative).
  std::vector<int64_t> start(size_t(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    while (start[size_t(b)] < N && tok[size_t(b * N + start[size_t(b)])] < 0) ++start[size_t(b)];
    if (start[size_t(b)] + 2 * half > N)
      fail<ShapeError>("circuit_scores: row {} has {} positions from its first token at {}, need 2 half = {}", b,
                       N - start[size_t(b)], start[size_t(b)], 2 * half);
  }
  auto visible = [&](int64_t n) { return causal ? double(n + 1) : double(N); };
  double prev_uniform = 0, ind_uniform = 0;
  int64_t prev_queries = 0, ind_queries = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = start[size_t(b)];
    for (int64_t n = s + 1; n < s + 2 * half; ++n) prev_uniform += 1.0 / visible(n), ++prev_queries;
    for (int64_t j = 0; j < half; ++j) ind_uniform += 1.0 / visible(s + half + j), ++ind_queries;
  }
  c.previous_uniform = prev_uniform / double(prev_queries);
  c.induction_uniform = ind_uniform / double(ind_queries);
  for (size_t l = 0; l < maps.size(); ++l) {
    const Tensor& p = maps[l];
    if (p.dim() != 4 || p.size(0) != B || p.size(2) != N || p.size(3) != N)
      fail<ShapeError>("circuit_scores: layer {}'s map must be ({}, h, {}, {}), got {}", l, B, N, N, to_string(p.shape()));
    const int64_t H = p.size(1);
    const std::vector<double> P = to(contiguous(p.detach()), kFloat64).to_vector<double>();  // (B, h, N, N)
    c.previous_token.emplace_back(size_t(H), 0.0);
    c.induction.emplace_back(size_t(H), 0.0);
    for (int64_t i = 0; i < H; ++i) {
      double prev = 0, ind = 0;
      for (int64_t b = 0; b < B; ++b) {
        const double* m = P.data() + (b * H + i) * N * N;
        const int64_t s = start[size_t(b)];
        for (int64_t n = s + 1; n < s + 2 * half; ++n) prev += m[n * N + n - 1];
        for (int64_t j = 0; j < half; ++j) ind += m[(s + half + j) * N + s + j + 1];
      }
      c.previous_token[l][size_t(i)] = prev / double(prev_queries);
      c.induction[l][size_t(i)] = ind / double(ind_queries);
    }
  }
  return c;
}

CircuitStats measure_circuits(const Probe& probe, int64_t batch, int64_t half, int64_t vocab, Generator& gen) {
  if (!probe.axis_tokens) fail<ValueError>("measure_circuits: the model's inputs are not tokens");
  data::Batch b;
  b.inputs = repeated_random_tokens(batch, half, vocab, probe.pad_id, gen);  // (B, 2 half)
  auto [logits, maps] = capture_attention(probe, b);
  return circuit_scores(maps, probe.axis_tokens(b), half, probe.causal);
}

}  // namespace attnlab::analysis

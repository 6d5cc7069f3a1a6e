// Shared by test_longformer.cpp and test_bigbird.cpp: the dense-masked twin (the oracle: the
// documented allowed rule written as a plain loop, then dense masked softmax attention with the
// layer's own weights), and the cases of tests/reference/blocks_golden.safetensors (run by
// tests/golden.hpp's runner).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "efficient_testing.hpp"
#include "golden.hpp"
#include "helpers.hpp"
#include "nn/attention/bigbird.hpp"
#include "nn/attention/longformer.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::blocks {

// allowed(b, i, n, m): the documented rule for batch b, head i, query n, key m.
using Rule = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;

struct Dense {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, M)
};

// Dense twin of a ProjectedAttention layer. With `global_rows`, those query rows use
// q_global/k_global/v_global (longformer's separate_global) against every key the rule allows.
inline Dense naive_dense(const nn::ProjectedAttention& a, const Tensor& x, const Tensor& c, const Rule& rule,
                        const nn::Longformer* separate = nullptr) {
  const int64_t B = x.size(0), N = x.size(1), M = c.size(1), h = a.config.heads;
  const double scale = 1.0 / std::sqrt(double(a.config.key_size));
  std::vector<bool> allowed(B * h * N * M);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) allowed[((b * h + i) * N + n) * M + m] = rule(b, i, n, m);
  Tensor mask = from_vector(allowed, {B, h, N, M});
  auto attend = [&](const nn::Linear& lq, const nn::Linear& lk) {  // (B, h, N, M)
    Tensor q = nn::split_heads(linear(lq, x), h), k = nn::split_heads(linear(lk, c), h);
    return softmax(matmul(q, transpose(k, -2, -1)) * scale, -1, mask);
  };
  Tensor p = attend(*a.q_proj, *a.k_proj);
  Tensor o = matmul(p, nn::split_heads(linear(*a.v_proj, c), h));  // (B, h, N, dv)
  if (separate && separate->q_global) {
    std::vector<bool> row(N, false);
    for (int64_t g : separate->options.global) row[g] = g < N;
    if (!separate->options.global_list)
      for (int64_t g = 0; g < std::min(separate->options.global_first, N); ++g) row[g] = true;
    Tensor is_row = from_vector(row, {1, 1, N, 1});
    Tensor pg = attend(*separate->q_global, *separate->k_global);
    Tensor og = matmul(pg, nn::split_heads(linear(*separate->v_global, c), h));
    p = where(is_row, pg, p);
    o = where(is_row, og, o);
  }
  o = o * nn::head_scale(a.gate, a.head_mask);
  return {linear(*a.out_proj, nn::merge_heads(o)), p};
}

// Reads a bool mask broadcastable to (B, h, N, M) (undefined = all true), for rules.
inline std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask_reader(const Tensor& mask) {
  if (!mask.defined()) return [](int64_t, int64_t, int64_t, int64_t) { return true; };
  Tensor m4 = mask;
  while (m4.dim() < 4) m4 = unsqueeze(m4, 0);
  return [m4](int64_t b, int64_t i, int64_t n, int64_t m) {
    return m4.at({m4.size(0) == 1 ? 0 : b, m4.size(1) == 1 ? 0 : i, m4.size(2) == 1 ? 0 : n,
                  m4.size(3) == 1 ? 0 : m}) != 0;
  };
}

// Random weights (not the defaults) so that every tensor moves the output; head_mask stays ones
// unless asked, and integer buffers (random_blocks) are left alone.
inline void randomize(nn::Attention& a, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  for (auto& [name, p] : a.named_parameters()) {
    Tensor t = p;
    copy_(t, randn(p.shape(), g, kFloat64, 0, 0.5));
  }
}

// ---- golden file (tests/reference/blocks_reference.py) ----

// Keep in sync with CASES in blocks_reference.py (test_bigbird.cpp checks it).
inline const std::vector<std::string> kGoldenCases = {
    "longformer_dilated_mask", "longformer_causal_separate_gate", "longformer_cross_separate",
    "longformer_blocks",       "bigbird_mask",                    "bigbird_cross",
};

inline const GoldenFile& golden() { return reference_file("blocks_golden.safetensors"); }

// longformer's cases run twice: its fused path (no need_weights) and the gathered-block twin.
inline void run_golden_case(const std::string& name) {
  GoldenCaseOptions opt;
  opt.also_without_weights = name.rfind("longformer", 0) == 0;
  testing::run_golden_case(golden(), name, opt);
}

}  // namespace attnlab::testing::blocks

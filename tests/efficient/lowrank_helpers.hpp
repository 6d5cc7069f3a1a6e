// Plain-loop building blocks for the dense twins of sinkhorn, linformer, compressed and nystrom
// (test_sinkhorn.cpp, test_linformer.cpp, test_compressed.cpp, test_nystrom.cpp): row-major
// std::vector<double> matrices, one batch element and one head at a time, nothing from the
// library but the layers' weights. Each twin writes the documented formulas out on these.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "efficient_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/projected.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::lowrank {

using Vec = std::vector<double>;

// A float64 layer built from `spec` with seeded weights.
inline std::shared_ptr<nn::Attention> layer64(const std::string& spec, int64_t d_model, uint64_t seed = 7) {
  auto a = float64_layer(spec, d_model, seed);
  a->eval();
  return a;
}

// Batch element b of x (B, T, D) as a (T, D) matrix.
inline Vec batch(const Tensor& x, int64_t b) {
  const int64_t T = x.size(1), D = x.size(2);
  Vec all = x.to_vector<double>();
  return Vec(all.begin() + b * T * D, all.begin() + (b + 1) * T * D);
}

// y = x W^T + b: x (rows, in) -> (rows, out).
inline Vec linear(const nn::Linear& l, const Vec& x, int64_t rows) { return linear_rows(x, rows, l.weight, l.bias); }

// Columns [i*d, (i+1)*d) of t (rows, width): head i, (rows, d).
inline Vec head(const Vec& t, int64_t rows, int64_t width, int64_t i, int64_t d) {
  Vec out(rows * d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) out[r * d + c] = t[r * width + i * d + c];
  return out;
}

// a (n, k) b (k, m) -> (n, m)
inline Vec mm(const Vec& a, const Vec& b, int64_t n, int64_t k, int64_t m) {
  Vec out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < k; ++t) acc += a[i * k + t] * b[t * m + j];
      out[i * m + j] = acc;
    }
  return out;
}

inline Vec tr(const Vec& a, int64_t n, int64_t m) {
  Vec out(n * m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) out[j * n + i] = a[i * m + j];
  return out;
}

// q (n, d) k (m, d) -> q k^T * scale (n, m)
inline Vec scores(const Vec& q, const Vec& k, int64_t n, int64_t m, int64_t d, double scale) {
  Vec s = mm(q, tr(k, m, d), n, d, m);
  for (double& e : s) e *= scale;
  return s;
}

// Row softmax of s (n, m) over the entries `allowed` (empty = all); a row with none allowed is 0.
inline Vec softmax_rows(const Vec& s, int64_t n, int64_t m, const std::vector<bool>& allowed = {}) {
  Vec p(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < m; ++j)
      if (allowed.empty() || allowed[j]) mx = std::max(mx, s[i * m + j]);
    if (mx == -INFINITY) continue;
    double z = 0;
    for (int64_t j = 0; j < m; ++j)
      if (allowed.empty() || allowed[j]) z += std::exp(s[i * m + j] - mx);
    for (int64_t j = 0; j < m; ++j)
      if (allowed.empty() || allowed[j]) p[i * m + j] = std::exp(s[i * m + j] - mx) / z;
  }
  return p;
}

// The common end of every variant: y = out_proj(concat_i(head_mask_i * O_i)) (eval mode, no
// gate), for head outputs o[b][i] (N, dv) -> (B, N, D).
inline Tensor finish(const nn::ProjectedAttention& l, const std::vector<std::vector<Vec>>& o, int64_t N) {
  const int64_t B = static_cast<int64_t>(o.size()), h = l.config.heads, dv = l.config.value_size;
  const int64_t D = l.out_proj->weight.size(0);
  Vec hm = l.head_mask.to_vector<double>();
  Vec y;
  for (int64_t b = 0; b < B; ++b) {
    Vec cat(N * h * dv);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t c = 0; c < dv; ++c) cat[n * h * dv + i * dv + c] = hm[i] * o[b][i][n * dv + c];
    Vec yb = linear(*l.out_proj, cat, N);
    y.insert(y.end(), yb.begin(), yb.end());
  }
  return from_vector(y, {B, N, D});
}

// allowed[b][i][m] of a key mask broadcastable to (B, h, 1, M) (undefined = all true).
inline std::vector<std::vector<std::vector<bool>>> key_allowed(const Tensor& mask, int64_t B, int64_t h, int64_t M) {
  std::vector<std::vector<std::vector<bool>>> a(B, std::vector<std::vector<bool>>(h, std::vector<bool>(M, true)));
  if (!mask.defined()) return a;
  Tensor m4 = mask;
  while (m4.dim() < 4) m4 = unsqueeze(m4, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < M; ++j)
        a[b][i][j] = m4.at({m4.size(0) == 1 ? 0 : b, m4.size(1) == 1 ? 0 : i, 0, m4.size(3) == 1 ? 0 : j}) != 0;
  return a;
}

// Parameters of a layer in registration order (gradcheck inputs).
inline std::vector<Tensor> params(const nn::Attention& a) {
  std::vector<Tensor> out;
  for (auto& [n, p] : a.named_parameters()) out.push_back(p);
  return out;
}

// Max |a - b| over two same-shaped tensors.
inline double max_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace attnlab::testing::lowrank

// Shared by the tests of the fused kernel's tile products (test_tile_bf16.cpp, test_tile_f32.cpp):
// random operands, a float64 product to check them against, and one forward + backward of
// tile_attention.
#pragma once
#include <cmath>
#include <random>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "tensor/bfloat16.hpp"

namespace attnlab::testing::tile_products {

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = d(rng);
  return x;
}

// C (m, n) = alpha A B (+ C0) in double, A(i, p) = a(i, p), B(p, j) = b(p, j); with bf16, from
// the operands rounded to bf16 (what the bf16 products multiply).
template <class FA, class FB>
std::vector<double> reference(int64_t m, int64_t n, int64_t k, double alpha, FA a, FB b, const std::vector<float>* C0,
                              bool bf16) {
  auto op = [bf16](float x) { return double(bf16 ? round_to_bfloat16(x) : x); };
  std::vector<double> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += op(a(i, p)) * op(b(p, j));
      c[i * n + j] = alpha * s + (C0 ? (*C0)[i * n + j] : 0.0);
    }
  return c;
}

// The relative distance max |a - b| / max |b| of two tensors of one shape.
inline double rel_dist(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t e = 0; e < x.size(); ++e) num = std::max(num, std::abs(x[e] - y[e])), den = std::max(den, std::abs(y[e]));
  return num / std::max(den, 1e-30);
}

struct Run {
  Tensor out, dq, dk, dv;
};

// tile_attention on copies of q, k, v, then backward from sum(out * go).
inline Run run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const nn::TilePattern& p, const nn::TileOptions& o,
               const Tensor& go) {
  Tensor q = clone(q0).requires_grad_(), k = clone(k0).requires_grad_(), v = clone(v0).requires_grad_();
  auto r = nn::tile_attention(q, k, v, p, o);
  sum(r.out * go).backward();
  return {r.out.detach(), q.grad(), k.grad(), v.grad()};
}

}  // namespace attnlab::testing::tile_products

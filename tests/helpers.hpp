// Shared test helpers: building tensors from literals and comparing them.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnlab.hpp"

namespace attnlab::testing {

inline Tensor t32(std::vector<float> v, Dims shape) { return from_vector(v, shape); }
inline Tensor t64(std::vector<double> v, Dims shape) { return from_vector(v, shape); }

// True when a and b have the same shape and |a - b| <= atol + rtol |b| elementwise.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.shape() != b.shape()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return false;
    if (std::isnan(x[i])) continue;
    if (std::isinf(x[i]) || std::isinf(y[i])) {
      if (x[i] != y[i]) return false;
      continue;
    }
    if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

// |got - want| / |want| in the Frobenius norm (shapes equal): the error of a whole product at
// reduced precision, where single entries near zero have large relative errors.
inline double rel_norm_err(const Tensor& got, const Tensor& want) {
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Packed-sequence segment ids, int64 (B, N): row b cut into consecutive documents of the lengths
// lengths[b] (equal totals), with ids 0, 1, 2, ... in each row.
inline Tensor segments_of(const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<int64_t> ids;
  for (const auto& row : lengths)
    for (int64_t d = 0; d < int64_t(row.size()); ++d) ids.insert(ids.end(), row[d], d);
  return from_vector(ids, {int64_t(lengths.size()), int64_t(ids.size() / lengths.size())});
}

// A float64 leaf that requires grad, from a seeded normal draw.
inline Tensor leaf64(Dims shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, g, kFloat64).requires_grad_();
}

// A float64 (rows, cols) matrix U diag(s) V^T with the given singular values s (k <= min(rows,
// cols) of them), U and V products of three Householder reflections I - 2 v v^T / (v^T v) with
// seeded Gaussian v: orthogonal by construction, without any factorisation routine.
inline Tensor with_singular_values(int64_t rows, int64_t cols, const std::vector<double>& s, uint64_t seed) {
  Generator g(seed);
  auto orthogonal = [&](int64_t n) {  // (n, n) row-major
    std::vector<double> q(size_t(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) q[size_t(i * n + i)] = 1;
    for (int r = 0; r < 3; ++r) {
      const std::vector<double> v = randn({n}, g, kFloat64).to_vector<double>();
      double vv = 0;
      for (double e : v) vv += e * e;
      for (int64_t i = 0; i < n; ++i) {  // row i of Q H = q_i - 2 (q_i . v) v^T / vv
        double d = 0;
        for (int64_t j = 0; j < n; ++j) d += q[size_t(i * n + j)] * v[size_t(j)];
        for (int64_t j = 0; j < n; ++j) q[size_t(i * n + j)] -= 2 * d / vv * v[size_t(j)];
      }
    }
    return q;
  };
  const std::vector<double> u = orthogonal(rows), w = orthogonal(cols);
  std::vector<double> a(size_t(rows * cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      for (size_t k = 0; k < s.size(); ++k) a[size_t(i * cols + j)] += u[i * rows + k] * s[k] * w[j * cols + k];
  return from_vector(a, {rows, cols});
}

// Message of the exception `f` throws, or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace attnlab::testing

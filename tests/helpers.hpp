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

// Helpers shared by the autograd tests: float64 leaves whose memory is deliberately
// non-contiguous (so every op's gradient is checked on strided inputs, docs/conventions.md,
// "Tests"), and a gradcheck wrapper that reports the first mismatch.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "helpers.hpp"

namespace attnlab::testing {

// `values` (no history) as a float64 leaf that requires grad and whose memory is not
// contiguous: the transpose of a transposed copy when it has two or more non-trivial trailing
// dims, otherwise every other element of a buffer twice as long.
inline Tensor nc_leaf(const Tensor& values) {
  Tensor v = to(values, kFloat64).detach();
  Tensor out;
  if (v.dim() >= 2) out = transpose(contiguous(transpose(v, -1, -2)), -1, -2).detach();
  if (!out.defined() || (out.is_contiguous() && v.numel() > 1)) {
    Dims wide = v.shape();
    wide.push_back(2);
    Tensor buf = zeros(wide, kFloat64);
    out = select(buf, -1, 0);
    copy_(out, v);
  }
  REQUIRE(out.shape() == v.shape());
  if (v.numel() > 1) REQUIRE(!out.is_contiguous());
  out.requires_grad_();
  return out;
}

// A non-contiguous float64 leaf drawn from N(0, 1).
inline Tensor nc_randn(Dims shape, uint64_t seed) {
  Generator g(seed);
  return nc_leaf(randn(shape, g, kFloat64));
}

// A non-contiguous float64 leaf with values in [lo, hi).
inline Tensor nc_uniform(Dims shape, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return nc_leaf(rand(shape, g, kFloat64, lo, hi));
}

// A non-contiguous float64 leaf from N(0, 1) with every value at least `margin` away from each
// of `points` (the kinks of relu, abs, clamp, ...), so central differences never straddle one.
inline Tensor nc_away(Dims shape, uint64_t seed, std::vector<double> points, double margin = 0.05) {
  Generator g(seed);
  std::vector<double> v = randn(shape, g, kFloat64).to_vector<double>();
  for (double& x : v)
    for (double p : points)
      if (std::abs(x - p) < margin) x = p + (x < p ? -2 : 2) * margin;
  return nc_leaf(from_vector(v, shape));
}

// Runs gradcheck and fails the enclosing test case with gradcheck's message.
inline void check_grad(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                       const std::vector<Tensor>& inputs, GradcheckOptions options = {}) {
  GradcheckResult r = gradcheck(fn, inputs, options);
  CHECK_MESSAGE(r.ok, what << ": " << r.message);
}

}  // namespace attnlab::testing

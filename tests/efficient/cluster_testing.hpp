// Shared by test_lsh.cpp and test_routing.cpp, whose dense twins (the documented clustering written
// with plain loops) need the same few pieces: a float64 layer of the concrete type, plain-vector
// projections and the user's mask as a predicate.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "efficient_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::cluster {

// The layer of `spec` as its concrete type, built after manual_seed(7), in float64.
template <class Layer>
std::shared_ptr<Layer> layer64(const std::string& spec, int64_t d_model = 8) {
  auto a = std::dynamic_pointer_cast<Layer>(float64_layer(spec, d_model));
  REQUIRE(a);
  return a;
}

// y = x W^T + b as plain vectors: (B*T, out).
inline std::vector<double> linear_values(const nn::Linear& l, const Tensor& x) { return linear(l, x).to_vector<double>(); }

// The mask as a function of (b, i, n, m); undefined = all allowed.
struct DenseMask {
  std::vector<double> v;
  int64_t h = 0, N = 0;
  DenseMask(const Tensor& mask, int64_t B, int64_t heads, int64_t n) : h(heads), N(n) {
    if (!mask.defined()) return;
    Tensor m = mask;
    while (m.dim() < 4) m = unsqueeze(m, 0);
    v = broadcast_to(m, {B, h, N, N}).to_vector<double>();  // (B, h, N, N)
  }
  bool operator()(int64_t b, int64_t i, int64_t n, int64_t m) const {
    return v.empty() || v[((b * h + i) * N + n) * N + m] != 0;
  }
};

}  // namespace attnlab::testing::cluster

// What the dense twins of the efficient variants share (blocks_testing.hpp, cluster_testing.hpp,
// kernelmix_testing.hpp, lowrank_helpers.hpp, test_patterns.cpp): a float64 layer from a spec, and
// the reference linear layer y = x W^T + b, as a tensor product and as a plain loop.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/registry.hpp"
#include "nn/linear.hpp"

namespace attnlab::testing {

// The layer of `spec` in float64, built after manual_seed(seed), in the mode it is built in.
inline std::shared_ptr<nn::Attention> float64_layer(const std::string& spec, int64_t d_model = 8, uint64_t seed = 7) {
  manual_seed(seed);
  auto a = nn::make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

// y = x W^T + b on the last dim of x.
inline Tensor linear(const nn::Linear& l, const Tensor& x) {
  Tensor y = matmul(x, transpose(l.weight, 0, 1));
  return l.bias.defined() ? y + l.bias : y;
}

// y = x W^T + b by plain loops on row-major data: x (rows, in) -> (rows, out).
inline std::vector<double> linear_rows(const std::vector<double>& x, int64_t rows, const Tensor& weight,
                                       const Tensor& bias) {
  const int64_t out = weight.size(0), in = weight.size(1);
  const auto w = weight.to_vector<double>();
  const std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(out, 0.0);
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

}  // namespace attnlab::testing

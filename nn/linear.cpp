// nn::Linear (see linear.hpp).
#include "nn/linear.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/init.hpp"

namespace attnlab::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0) fail<ValueError>("Linear: sizes must be positive, got in_features={}, out_features={}", in, out);
  weight = register_parameter("weight", Tensor::empty(Dims{out, in}));  // (out, in)
  if (has_bias) bias = register_parameter("bias", Tensor::empty(Dims{out}));  // (out)
  reset_parameters();
}

void Linear::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::FanIn, "leaky_relu", gen);
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(in_features));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) {
  Tensor y = forward_without_bias(x);    // (..., out)
  return bias.defined() ? y + bias : y;  // (..., out) + (out)
}

Tensor Linear::forward_without_bias(const Tensor& x) {
  if (x.dim() == 0 || x.shape().back() != in_features)
    fail<ShapeError>("Linear(in_features={}, out_features={}): expected input (..., {}), got {}", in_features,
                     out_features, in_features, to_string(x.shape()));
  return matmul(x, transpose(weight, 0, 1));  // (..., in) @ (in, out) -> (..., out)
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

}  // namespace attnlab::nn

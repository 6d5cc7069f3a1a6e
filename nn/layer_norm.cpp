// nn::LayerNorm (see layer_norm.hpp).
#include "nn/layer_norm.hpp"

#include "autograd/ops.hpp"
#include "nn/init.hpp"

namespace attnlab::nn {

LayerNorm::LayerNorm(int64_t dim, double eps, bool elementwise_affine, bool has_bias) : dim(dim), eps(eps) {
  if (dim <= 0) fail<ValueError>("LayerNorm: dim must be positive, got {}", dim);
  if (!(eps >= 0)) fail<ValueError>("LayerNorm: eps must be non-negative, got {}", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", Tensor::empty(Dims{dim}));           // (dim)
    if (has_bias) bias = register_parameter("bias", Tensor::empty(Dims{dim}));  // (dim)
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

void LayerNorm::check_input(const Tensor& x) const {
  if (x.dim() == 0 || x.shape().back() != dim)
    fail<ShapeError>("LayerNorm({}): expected input (..., {}), got {}", dim, dim, to_string(x.shape()));
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_input(x);
  return layer_norm(x, weight, bias, eps);  // (..., dim)
}

AddLayerNorm LayerNorm::forward_residual(const Tensor& x, const Tensor& residual) {
  check_input(x);
  return add_layer_norm(x, residual, weight, bias, eps);  // (..., dim) twice
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}, bias={}", dim, eps, weight.defined(), bias.defined());
}

}  // namespace attnlab::nn

// nn::LayerNorm (see layer_norm.hpp).
#include "nn/layer_norm.hpp"

#include "autograd/grad_mode.hpp"
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

Tensor LayerNorm::forward(const Tensor& x) {
  if (x.dim() == 0 || x.shape().back() != dim)
    fail<ShapeError>("LayerNorm({}): expected input (..., {}), got {}", dim, dim, to_string(x.shape()));
  Tensor mu = mean(x, {-1}, true);                     // (..., 1)
  Tensor var_ = var(x, {-1}, /*correction=*/0, true);  // (..., 1)
  Tensor inv_std = rsqrt(var_ + eps);                  // (..., 1)
  // LRP's LN-rule: 1/std is a constant, so the layer is linear in x (grad_mode.hpp).
  if (ConservativeMode::is_enabled()) inv_std = inv_std.detach();
  Tensor y = (x - mu) * inv_std;                       // (..., dim)
  if (weight.defined()) y = y * weight;                // (..., dim) * (dim)
  if (bias.defined()) y = y + bias;                    // (..., dim) + (dim)
  return y;
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}, bias={}", dim, eps, weight.defined(), bias.defined());
}

}  // namespace attnlab::nn

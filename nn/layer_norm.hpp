/// @file
/// nn::LayerNorm over the last dim (Ba, Kiros & Hinton 2016; torch.nn.LayerNorm with an int
/// normalized_shape): y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased
/// variance (correction 0). Runs the fused layer_norm op (autograd/ops.hpp); its composed twin
/// layer_norm_reference (mean, var, rsqrt) runs under ConservativeMode. Parameters (when
/// elementwise_affine): weight (dim) = 1, bias (dim) = 0 (bias only when bias = true).
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Layer normalisation over the last dim (nn.LayerNorm), with optional weight and bias.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);  ///< weight ones (dim) and bias zeros (dim), as asked for; ValueError for dim <= 0 or eps < 0
  void reset_parameters();  ///< weight back to ones, bias to zeros
  /// x (..., dim) -> (..., dim)
  Tensor forward(const Tensor& x) override;
  /// The residual add before the norm, fused: {x + residual, forward(x + residual)}, both with
  /// history (x and residual (..., dim)).
  AddLayerNorm forward_residual(const Tensor& x, const Tensor& residual);
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  int64_t dim;  ///< the size of the normalised last dim
  double eps;  ///< added to the variance
  Tensor weight;  ///< (dim), undefined without elementwise_affine
  Tensor bias;    ///< (dim), undefined without elementwise_affine or bias

 private:
  void check_input(const Tensor& x) const;
};

}  // namespace attnlab::nn
/// @}

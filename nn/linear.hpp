/// @file
/// nn::Linear: y = x W^T + b over the last dim of x, for any leading dims (torch.nn.Linear).
/// Parameters: weight (out_features, in_features), bias (out_features) unless bias = false.
/// Initialised like PyTorch: kaiming_uniform_(a = sqrt(5)) on the weight, which is
/// U(-1/sqrt(in), 1/sqrt(in)), and the same bound for the bias.
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// y = x W^T + b, PyTorch's nn.Linear (same parameter names and initialisation).
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);  ///< weight (out, in) and bias (out) drawn from the default generator
  /// Redraws the parameters from `gen` (the constructor uses the default generator).
  void reset_parameters(Generator& gen = default_generator());
  /// x (..., in) -> (..., out)
  Tensor forward(const Tensor& x) override;
  /// x W^T alone, for callers that fuse the bias into the next pass (FeedForward's bias_gelu).
  Tensor forward_without_bias(const Tensor& x);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features;   ///< the size of the input's last dim
  int64_t out_features;  ///< the size of the output's last dim
  Tensor weight;  ///< (out, in)
  Tensor bias;    ///< (out), undefined when bias = false
};

}  // namespace attnlab::nn
/// @}

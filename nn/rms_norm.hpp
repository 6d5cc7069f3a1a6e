/// @file
/// nn::RMSNorm over the last dim (Zhang & Sennrich 2019, as used by LLaMA):
/// y = x / sqrt(mean(x^2) + eps) * weight. No mean subtraction and no bias. Composed from
/// mean, square and rsqrt. Parameter: weight (dim) = 1.
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Root-mean-square normalisation over the last dim (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);  ///< weight ones (dim)
  void reset_parameters();  ///< weight back to ones
  /// x (..., dim) -> (..., dim)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;

  int64_t dim;  ///< the size of the normalised last dim
  double eps;  ///< added to the mean square
  Tensor weight;  ///< (dim)
};

}  // namespace attnlab::nn
/// @}

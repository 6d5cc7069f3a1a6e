/// @file
/// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_ in PyTorch 1.13.
/// Parameters whose grad is undefined are skipped; gradients are changed in place.
/// @ingroup optim
#pragma once
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
/// p-norm of all gradients concatenated into one vector (norm_type = p > 0, or INFINITY for the
/// max norm). Returns total_norm (0 when no parameter has a gradient). A NaN or infinite norm
/// turns the gradients into NaN like torch, unless error_if_nonfinite, which throws ValueError
/// and leaves them unchanged. Sums run in double over fixed blocks, so the result does not
/// depend on the thread count.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace attnlab::optim
/// @}

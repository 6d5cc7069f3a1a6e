/// @file
/// The one finite-loss guard every training loop calls before backward: a NaN or infinite loss
/// stops the loop with an error naming the loop, the step and the value, instead of training on
/// (and reporting) a diverged model.
/// @ingroup optim
#pragma once
#include <cstdint>
#include <string>

#include "tensor/tensor.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// Returns loss.item() (a one-element tensor); throws ValueError
/// "<loop>: the loss is nan at step <step>; training diverged ..." if it is NaN or infinite.
double check_finite_loss(const Tensor& loss, const std::string& loop, int64_t step);

}  // namespace attnlab::optim
/// @}

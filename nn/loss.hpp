/// @file
/// Loss functions, with PyTorch's semantics (torch.nn.functional), except that the class dim of
/// cross_entropy and nll_loss is the LAST dim: logits (..., C) with targets (...), the layout of
/// a language model's output.
///
/// reduction: "mean" (default), "sum" or "none" (one loss per target, same shape as targets).
/// With ignore_index, "mean" averages over the targets that are not ignored (NaN if all are);
/// ignored positions get loss 0 and gradient 0. A target outside [0, C) that is not
/// ignore_index is an IndexError naming it.
/// @ingroup nn
#pragma once
#include <string>

#include "autograd/ops.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Softmax cross-entropy: loss = (1 - eps) * (-log p_target) + eps * mean_c(-log p_c) with
/// eps = label_smoothing in [0, 1] (Szegedy et al. 2016; PyTorch's definition). One fused
/// primitive: forward per row log-softmax + NLL + smoothing, backward
/// (softmax - smoothed one-hot) * grad.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, const std::string& reduction = "mean");
/// The same loss composed from log_softmax, gather and a masked mean: the readable twin the
/// tests compare the fused version with (values and gradients).
Tensor cross_entropy_reference(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                              double label_smoothing = 0.0, const std::string& reduction = "mean");
/// Negative log-likelihood of log-probabilities (..., C) at int64 targets (...).
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index = -100,
                const std::string& reduction = "mean");
/// (a - b)^2, a and b of the same shape.
Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction = "mean");

}  // namespace attnlab::nn
/// @}

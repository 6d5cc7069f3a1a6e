/// @file
/// gradcheck: compares the gradients autograd computes for `fn` with central differences, in
/// float64, for a random upstream gradient. Use it on your own ops and layers:
///
///   auto r = gradcheck([](const std::vector<Tensor>& in) { return my_layer(in[0], in[1]); },
///                      {x, w});  // float64 tensors with requires_grad_()
///   if (!r) std::puts(r.message.c_str());
/// @ingroup autograd
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup autograd
/// @{
namespace attnlab {

/// Tolerances and sampling of gradcheck().
struct GradcheckOptions {
  double eps = 1e-6;   ///< finite-difference step
  double atol = 1e-5;  ///< pass if |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;  ///< relative tolerance (see atol)
  uint64_t seed = 0;   ///< for the random upstream gradient
  /// Elements checked per input: 0 = every one; otherwise at most this many, spread evenly over
  /// the input (large weight tables, where every element would cost two forward calls).
  int64_t max_elements = 0;
};

/// Whether every checked gradient matched, the largest error, and the first mismatch.
struct GradcheckResult {
  bool ok = true;  ///< every checked element within tolerance
  double max_abs_error = 0;  ///< the largest |analytic - numeric| seen
  std::string message;  ///< the first mismatch, naming the input and element
  explicit operator bool() const { return ok; }  ///< ok
};

/// Inputs that require grad must be float64; others (indices, masks, constants) pass through.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace attnlab
/// @}

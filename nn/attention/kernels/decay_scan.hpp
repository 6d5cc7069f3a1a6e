/// @file
/// The chunk-to-chunk state recursion of chunked retention (Sun et al. 2023) as one op: an
/// exclusive prefix sum with a constant decay per head, along the chunk axis,
///
///   S[b, i, 0] = 0,    S[b, i, j] = decay[i] S[b, i, j - 1] + A[b, i, j - 1],
///
/// that is S[b, i, j] = sum_{m < j} decay[i]^(j - 1 - m) A[b, i, m]. Retention calls it with
/// A[b, i, j] = the decayed K^T V of chunk j (dk x dv) and decay[i] = gamma_i^C, so S[j] is the
/// state that chunk j starts from. One pass, O(B h J E) time for A of shape (B, h, J, E...), and
/// its backward is the same recursion run backwards (the map is linear, its adjoint the reverse
/// scan): dA[b, i, J - 1] = 0, dA[b, i, j] = decay[i] dA[b, i, j + 1] + dS[b, i, j + 1].
///
/// A loop over chunks that narrows A (or q, k, v) chunk by chunk would cost O(J) per chunk in
/// the backward pass, where every narrow's gradient is a zero tensor of the whole length: O(N^2)
/// in all. decayed_exclusive_scan_reference is the naive twin, plain loops in double, and the
/// test oracle (tests/attention/test_retention.cpp).
/// @ingroup attention
#pragma once
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn::scan {

/// The differentiable scan above. a: (B, h, J, ...) float32 or float64, any trailing dims;
/// decay: h factors (constants, no gradient). Returns S, a's shape and dtype. ShapeError when a
/// has fewer than 3 dims or decay.size() != a.size(1); DTypeError for other dtypes.
Tensor decayed_exclusive_scan(const Tensor& a, const std::vector<double>& decay);

/// The naive twin: S[b, i, j] = sum_{m < j} decay[i]^(j - 1 - m) A[b, i, m] by plain loops in
/// double, O(B h J^2 E); the result in a's dtype, without autograd.
Tensor decayed_exclusive_scan_reference(const Tensor& a, const std::vector<double>& decay);

}  // namespace attnlab::nn::scan
/// @}

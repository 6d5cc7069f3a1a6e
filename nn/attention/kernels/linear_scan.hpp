/// @file
/// The causal "linear product" of linear attention (Katharopoulos et al. 2020, section 3.3):
///
///   out[n] = sum_{m <= n} (a[n] . b[m]) c[m]          (reverse: sum over m >= n)
///
/// computed by a scan that keeps the running state S = sum_m b[m] c[m]^T (F x E) instead of
/// the N x N matrix of products. Linear attention calls it with a = phi(q), b = phi(k) and
/// c = [v, 1], so that one scan yields the numerator (the v columns) and the normaliser z . phi(q)
/// (the ones column) together.
///
/// Positions are processed in chunks of kScanChunk: inside a chunk the products are one small
/// lower-triangular matrix (L x L, L <= kScanChunk) and BLAS products; across chunks only S is
/// carried. Memory is the inputs and outputs, O(N (F + E)), plus O(kScanChunk^2 + F E) scratch per
/// thread; time O(N (kScanChunk + F) (F + E)). No (N, F, E) cumulative tensor is ever formed.
///
/// causal_product() is differentiable. Its backward is three scans of the same kind (the reverse
/// recursion; no forward state is saved):
///   da = P(g, c, b),   db = P_rev(c, g, a),   dc = P_rev(b, a, g)
/// causal_product_reference is its naive twin, the quadratic form with plain loops, and the test
/// oracle (tests/efficient/test_linear_attention.cpp).
/// @ingroup attention
#pragma once
#include "tensor/tensor.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn::scan {

inline constexpr int64_t kScanChunk = 64;  ///< positions per chunk (see above)

/// a, b (R, N, F), c (R, N, E) -> (R, N, E), all of one floating dtype; no autograd.
/// reverse = false sums m <= n, reverse = true sums m >= n.
Tensor prefix_product(const Tensor& a, const Tensor& b, const Tensor& c, bool reverse);

/// The differentiable op on (..., N, F), (..., N, F), (..., N, E) -> (..., N, E) (leading dims
/// equal), causal (m <= n) or anti-causal (m >= n).
Tensor causal_product(const Tensor& a, const Tensor& b, const Tensor& c, bool reverse = false);

/// The naive twin of causal_product for a, b (R, N, F), c (R, N, E): out[r, n] =
/// sum_{m <= n} (a[r, n] . b[r, m]) c[r, m] (m >= n when reversed) by plain loops in double,
/// O(R N^2 (F + E)); the result in a's dtype, without autograd.
Tensor causal_product_reference(const Tensor& a, const Tensor& b, const Tensor& c, bool reverse = false);

}  // namespace attnlab::nn::scan
/// @}

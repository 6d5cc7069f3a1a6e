/// @file
/// CP (CANDECOMP/PARAFAC) decomposition of a 3-way tensor by alternating least squares
/// (Kolda & Bader 2009, "Tensor Decompositions and Applications", section 3.4), used by
/// `to_collaborative` (docs/attention.md, "to_collaborative") to factor the stacked per-head
/// bilinear forms Wq_i^T Wk_i of a trained `mha` layer into shared query/key projections and a
/// mixing matrix (Cordonnier, Loukas, Jaggi 2020).
///
///   T[a, i, b] ~= sum_r A[a, r] * M[i, r] * B[b, r]
///
/// Everything runs in float64 on attnlab tensors (einsum for the unfolded products, matmul for
/// the Gram matrices); the (R x R) normal equations are solved by a Cholesky factorisation
/// written here.
/// @ingroup attention
#pragma once
#include <cstdint>

#include "tensor/tensor.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// How cp_decompose runs alternating least squares.
struct CPOptions {
  int64_t max_iterations = 1000;  ///< ALS sweeps (each updates A, then M, then B)
  /// Stop when the relative error falls below `tolerance` or changes by less than
  /// `tolerance` between two sweeps.
  double tolerance = 1e-10;
  uint64_t seed = 0;  ///< the factors start as N(0, 1) draws from Generator(seed)
  /// After sweep k > 1, try the extrapolation X_prev + k^(1/3) (X - X_prev) of all three
  /// factors and keep it when it lowers the error (Bro 1998; tensorly's `linesearch`). It gets
  /// ALS out of its "swamps" (long plateaus when factor columns are nearly collinear, as the
  /// mixing factor's must be when Dk~ > h).
  bool line_search = true;
};

/// How a CP fit ended.
struct CPReport {
  double relative_error = 0;  ///< ||T - T^|| / ||T|| (Frobenius), 0 for T = 0
  int64_t iterations = 0;     ///< ALS sweeps run; 0 when no fit was needed
  bool converged = false;     ///< stopped by the tolerance, not by the iteration cap
};

/// The CP factors of a 3-way tensor and the fit's report.
struct CPFactors {
  Tensor a;  ///< (I, R) float64
  Tensor m;  ///< (J, R) float64
  Tensor b;  ///< (K, R) float64
  CPReport report;  ///< how the fit ended
};

/// Rank-`rank` CP decomposition of `t` (I, J, K), any floating dtype. On return each column of
/// `m` has unit norm (or is zero) and the columns r of `a` and `b` have equal norms, so the
/// component's weight is split evenly between the two outer factors.
CPFactors cp_als(const Tensor& t, int64_t rank, const CPOptions& options = {});

/// sum_r a[:, r] (x) m[:, r] (x) b[:, r] -> (I, J, K)
Tensor cp_reconstruct(const Tensor& a, const Tensor& m, const Tensor& b);

/// X with X V = G, for V (R, R) symmetric positive semi-definite and G (n, R): Cholesky of V,
/// with a ridge of 1e-12 * mean(diag V) added (raised tenfold until the factorisation succeeds)
/// so that collinear or zero factor columns do not make the normal equations singular.
Tensor solve_normal_equations(const Tensor& v, const Tensor& g);

}  // namespace attnlab::nn
/// @}

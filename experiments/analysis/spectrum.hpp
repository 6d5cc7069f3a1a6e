/// @file
/// Singular-value spectra of small weight matrices, for the low-rank analysis of key/query
/// projections (Cordonnier, Loukas, Jaggi 2020, "Multi-Head Attention: Collaborate Instead of
/// Concatenate", Figure 1): the cumulative energy sum_{j<=r} s_j^2 / sum_j s_j^2 against the
/// rank r. The singular values come from LAPACK's SVD (dgesdd, tensor/lapack.hpp) in float64,
/// without forming a Gram matrix, so values down to ~1e-12 of the largest are resolved for a
/// float64 matrix. A float32 matrix is widened to float64 first: its own entries carry rounding of
/// ~6e-8 relative, so for it values below ~1e-7 of the largest are that rounding.
/// @ingroup analysis
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

/// Eigenvalues of the symmetric n x n matrix `a` (row-major, n*n values), largest first (dsyevd).
/// ValueError when a.size() != n*n or `a` is not symmetric (to 1e-9 relative).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n);

/// Singular values of a 2-D tensor (any floating dtype), largest first; min(rows, cols) of them.
/// m and m^T give bitwise the same values.
std::vector<double> singular_values(const Tensor& m);

/// c[r-1] = sum_{j<=r} s_j^2 / sum_j s_j^2 for r = 1..s.size(); all ones when every s_j is 0.
std::vector<double> cumulative_energy(const std::vector<double>& s);

/// The smallest rank r with cumulative energy >= fraction (1-based; s.size() at most).
int64_t energy_rank(const std::vector<double>& cumulative, double fraction);

/// Cordonnier et al.'s concatenated per-head products [Wq_1^T Wk_1, ..., Wq_h^T Wk_h] (D, h*D)
/// from PyTorch-layout projection weights q_weight, k_weight (h*dk, D): head i's bilinear form
/// x^T Wq_i^T Wk_i y is what its attention scores see.
Tensor concat_qk_products(const Tensor& q_weight, const Tensor& k_weight, int64_t heads);

}  // namespace attnlab::analysis
/// @}

/// @file
/// Dense linear algebra in float64 through LAPACK: SVD (dgesdd), symmetric eigenvalues (dsyevd),
/// Cholesky (dpotrf, dpotrs) and QR (dgeqrf, dorgqr). The routines come from the OpenBLAS that
/// attnlab already links (Debian's libopenblas0 exports LAPACK); its -dev package ships no
/// lapacke.h, so lapack.cpp declares the Fortran entry points itself. Matrices here are row-major
/// std::vector<double>; the wrappers do the column-major bookkeeping. LAPACK runs on the calling
/// thread with OpenBLAS single-threaded (tensor/parallel.hpp), so results are bitwise-stable
/// across runs.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <vector>

/// @addtogroup tensor
/// @{
namespace attnlab::lapack {

/// The min(rows, cols) singular values of the row-major (rows, cols) matrix `a`, largest first
/// (dgesdd, values only). Backward stable: each value is exact to about 1e-15 * (largest) for
/// matrices up to a few hundred wide, so values down to 1e-12 of the largest come out to ~1e-3
/// relative accuracy.
std::vector<double> singular_values(std::vector<double> a, int64_t rows, int64_t cols);

/// The eigenvalues of the symmetric n x n row-major matrix `a`, largest first (dsyevd; only the
/// lower triangle in row-major order is read).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n);

/// Overwrites the symmetric positive definite n x n row-major `a` with its lower Cholesky factor
/// L (L L^T = a; the strict upper triangle is left as it was). Returns false, with `a` in an
/// unspecified state, when a leading minor is not positive (dpotrf's info > 0).
bool cholesky(std::vector<double>& a, int64_t n);

/// Given the lower Cholesky factor `l` (n x n row-major) of a symmetric V, solves X V = G in
/// place: `g` holds G (rows, n) row-major on entry and X on return (dpotrs; V symmetric makes
/// X V = G the same system as V X^T = G^T, and G^T column-major is G row-major).
void cholesky_solve_right(const std::vector<double>& l, int64_t n, double* g, int64_t rows);

/// The orthogonal factor Q (n x n, row-major) of the QR factorisation of the square row-major
/// `a`, with the signs fixed so that R has a non-negative diagonal (Q * diag(sign(diag R)) of
/// dgeqrf/dorgqr): the unique Q of any QR of a full-rank `a`.
std::vector<double> orthogonal_q(const std::vector<double>& a, int64_t n);

}  // namespace attnlab::lapack
/// @}

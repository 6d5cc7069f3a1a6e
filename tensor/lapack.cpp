// LAPACK wrappers (lapack.hpp). A row-major (r, c) buffer is the column-major (c, r) matrix, its
// transpose: singular values, a symmetric matrix and a right-hand side G^T all read it as is.
#include "tensor/lapack.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>

#include "tensor/error.hpp"
#include "tensor/parallel.hpp"

// The Fortran entry points (LP64 integers; each character argument has a hidden length
// argument at the end, as gfortran passes them).
extern "C" {
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info, size_t uplo_len);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
}

namespace attnlab::lapack {
namespace {

// A dimension as LAPACK's int; ValueError naming the routine when it does not fit.
int lapack_int(int64_t v, const char* routine) {
  if (v < 0 || v > INT_MAX) fail<ValueError>("lapack {}: dimension {} is outside [0, {}]", routine, v, INT_MAX);
  return int(v);
}

// Checks the buffer against its sizes and that every entry is finite. Also makes sure attnlab's
// thread setup has run, which sets OpenBLAS (and so LAPACK) to one thread: results then do not
// depend on OpenBLAS's thread count.
void check_size(const std::vector<double>& a, int64_t rows, int64_t cols, const char* routine) {
  num_threads();
  if (rows < 0 || cols < 0 || int64_t(a.size()) != rows * cols)
    fail<ShapeError>("lapack {}: {} values for a {} x {} matrix (expected {})", routine, a.size(), rows, cols,
                     rows * cols);
  for (double v : a)
    if (!std::isfinite(v)) fail<ValueError>("lapack {}: the matrix has a non-finite entry ({})", routine, v);
}

// info < 0 is an argument LAPACK rejected: a bug in these wrappers, reported as such.
void check_arguments(int info, const char* routine) {
  if (info < 0) fail<Error>("lapack {}: argument {} rejected (a bug in tensor/lapack.cpp)", routine, -info);
}

}  // namespace

std::vector<double> singular_values(std::vector<double> a, int64_t rows, int64_t cols) {
  check_size(a, rows, cols, "dgesdd");
  const int m = lapack_int(cols, "dgesdd"), n = lapack_int(rows, "dgesdd");  // column-major A^T (cols, rows)
  const int k = std::min(m, n), lda = std::max(1, m), one = 1;
  std::vector<double> s(static_cast<size_t>(k));
  if (k == 0) return s;
  std::vector<int> iwork(static_cast<size_t>(8 * k));
  int info = 0, lwork = -1;
  double query = 0, unused = 0;
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &unused, &one, &unused, &one, &query, &lwork, iwork.data(), &info, 1);
  check_arguments(info, "dgesdd");
  lwork = int(query);
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  dgesdd_("N", &m, &n, a.data(), &lda, s.data(), &unused, &one, &unused, &one, work.data(), &lwork, iwork.data(),
          &info, 1);
  check_arguments(info, "dgesdd");
  if (info > 0) fail<ValueError>("lapack dgesdd: the SVD of a {} x {} matrix did not converge", rows, cols);
  return s;  // dgesdd returns them in decreasing order
}

std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n) {
  check_size(a, n, n, "dsyevd");
  const int nn = lapack_int(n, "dsyevd"), lda = std::max(1, nn);
  std::vector<double> w(static_cast<size_t>(n));
  if (n == 0) return w;
  int info = 0, lwork = -1, liwork = -1, iquery = 0;
  double query = 0;
  // Column-major upper triangle = row-major lower triangle.
  dsyevd_("N", "U", &nn, a.data(), &lda, w.data(), &query, &lwork, &iquery, &liwork, &info, 1, 1);
  check_arguments(info, "dsyevd");
  lwork = int(query), liwork = iquery;
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  std::vector<int> iwork(static_cast<size_t>(std::max(liwork, 1)));
  dsyevd_("N", "U", &nn, a.data(), &lda, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
  check_arguments(info, "dsyevd");
  if (info > 0) fail<ValueError>("lapack dsyevd: the eigenvalues of a {} x {} matrix did not converge", n, n);
  std::reverse(w.begin(), w.end());  // dsyevd: ascending
  return w;
}

bool cholesky(std::vector<double>& a, int64_t n) {
  check_size(a, n, n, "dpotrf");
  const int nn = lapack_int(n, "dpotrf"), lda = std::max(1, nn);
  int info = 0;
  // Column-major U with U^T U = a is the row-major L = U^T.
  dpotrf_("U", &nn, a.data(), &lda, &info, 1);
  check_arguments(info, "dpotrf");
  return info == 0;
}

void cholesky_solve_right(const std::vector<double>& l, int64_t n, double* g, int64_t rows) {
  if (int64_t(l.size()) != n * n)
    fail<ShapeError>("lapack dpotrs: {} values for an {} x {} factor (expected {})", l.size(), n, n, n * n);
  const int nn = lapack_int(n, "dpotrs"), nrhs = lapack_int(rows, "dpotrs"), lda = std::max(1, nn);
  if (nn == 0 || nrhs == 0) return;
  int info = 0;
  dpotrs_("U", &nn, &nrhs, l.data(), &lda, g, &lda, &info, 1);
  check_arguments(info, "dpotrs");
}

std::vector<double> orthogonal_q(const std::vector<double>& a, int64_t n) {
  check_size(a, n, n, "dgeqrf");
  const int nn = lapack_int(n, "dgeqrf"), lda = std::max(1, nn);
  if (n == 0) return {};
  std::vector<double> qr(static_cast<size_t>(n * n));  // column-major copy of a
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) qr[size_t(i + j * n)] = a[size_t(i * n + j)];
  std::vector<double> tau(static_cast<size_t>(n));
  int info = 0, lwork = -1;
  double query = 0;
  dgeqrf_(&nn, &nn, qr.data(), &lda, tau.data(), &query, &lwork, &info);
  check_arguments(info, "dgeqrf");
  lwork = int(query);
  std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
  dgeqrf_(&nn, &nn, qr.data(), &lda, tau.data(), work.data(), &lwork, &info);
  check_arguments(info, "dgeqrf");
  std::vector<double> sign(static_cast<size_t>(n));  // sign(R_jj), +1 for a zero pivot
  for (int64_t j = 0; j < n; ++j) sign[size_t(j)] = qr[size_t(j + j * n)] < 0 ? -1.0 : 1.0;
  lwork = -1;
  dorgqr_(&nn, &nn, &nn, qr.data(), &lda, tau.data(), &query, &lwork, &info);
  check_arguments(info, "dorgqr");
  lwork = int(query);
  work.assign(size_t(std::max(lwork, 1)), 0.0);
  dorgqr_(&nn, &nn, &nn, qr.data(), &lda, tau.data(), work.data(), &lwork, &info);
  check_arguments(info, "dorgqr");
  std::vector<double> q(static_cast<size_t>(n * n));  // row-major, column j times sign(R_jj)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) q[size_t(i * n + j)] = qr[size_t(i + j * n)] * sign[size_t(j)];
  return q;
}

}  // namespace attnlab::lapack

// tensor/lapack.hpp against matrices whose answers are known by construction: singular values
// 1 ... 1e-12, eigenvalues of a hand-made symmetric matrix, L L^T = V and X V = G for Cholesky,
// Q^T Q = I and R = Q^T A upper triangular with a positive diagonal for QR; bitwise repeatability;
// errors naming the routine. At the end: the BLAS the products run on (tensor/blas_info.hpp).
#include "tensor/blas_info.hpp"
#include "tensor/lapack.hpp"

#include "helpers.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

std::vector<double> gaussian(int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  return randn({rows, cols}, g, kFloat64).to_vector<double>();
}

}  // namespace

TEST_CASE("lapack singular_values: 1 ... 1e-12 resolved, wide and tall, empty") {
  std::vector<double> want;
  for (int e = 0; e <= 12; ++e) want.push_back(std::pow(10.0, -e));
  const Tensor a = with_singular_values(13, 17, want, 1);  // (13, 17)
  const std::vector<double> s = lapack::singular_values(a.to_vector<double>(), 13, 17);
  const std::vector<double> st = lapack::singular_values(contiguous(transpose(a, 0, 1)).to_vector<double>(), 17, 13);
  REQUIRE(s.size() == want.size());
  REQUIRE(st.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(s[i] - want[i]) <= 1e-3 * want[i]);
    CHECK(std::abs(st[i] - want[i]) <= 1e-3 * want[i]);
  }
  CHECK(lapack::singular_values(a.to_vector<double>(), 13, 17) == s);  // bitwise repeatable
  CHECK(lapack::singular_values({}, 0, 4).empty());
}

TEST_CASE("lapack symmetric_eigenvalues: a known spectrum, largest first, negatives included") {
  // [[2, 1, 0], [1, 2, 0], [0, 0, -1]]: eigenvalues 3, 1, -1.
  const std::vector<double> ev = lapack::symmetric_eigenvalues({2, 1, 0, 1, 2, 0, 0, 0, -1}, 3);
  REQUIRE(ev.size() == 3);
  CHECK(ev[0] == doctest::Approx(3).epsilon(1e-14));
  CHECK(ev[1] == doctest::Approx(1).epsilon(1e-14));
  CHECK(ev[2] == doctest::Approx(-1).epsilon(1e-14));
}

TEST_CASE("lapack cholesky and cholesky_solve_right: L L^T = V, X V = G, false when not positive definite") {
  const int64_t n = 5, rows = 3;
  const std::vector<double> b = gaussian(n, n, 2);
  std::vector<double> v(size_t(n * n));  // B B^T + I, (n, n)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) v[i * n + j] += b[i * n + k] * b[j * n + k];
      v[i * n + j] += i == j;
    }
  std::vector<double> l = v;
  REQUIRE(lapack::cholesky(l, n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (j > i) CHECK(l[i * n + j] == v[i * n + j]);  // the strict upper triangle is left alone
      if (j == i) CHECK(l[i * n + i] > 0);
      double llt = 0;
      for (int64_t k = 0; k <= std::min(i, j); ++k) llt += l[i * n + k] * l[j * n + k];
      CHECK(llt == doctest::Approx(v[i * n + j]).epsilon(1e-12));
    }
  const std::vector<double> x = gaussian(rows, n, 3);  // (rows, n)
  std::vector<double> g(size_t(rows * n));            // X V
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < n; ++k) g[r * n + j] += x[r * n + k] * v[k * n + j];
  lapack::cholesky_solve_right(l, n, g.data(), rows);
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(x[i]).epsilon(1e-10));

  std::vector<double> indefinite = {1, 2, 2, 1};  // eigenvalues 3, -1
  CHECK_FALSE(lapack::cholesky(indefinite, 2));
}

TEST_CASE("lapack orthogonal_q: orthogonal, R = Q^T A upper triangular with a positive diagonal") {
  const int64_t n = 6;
  const std::vector<double> a = gaussian(n, n, 4);
  const std::vector<double> q = lapack::orthogonal_q(a, n);
  REQUIRE(q.size() == size_t(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double qtq = 0, r = 0;  // (Q^T Q)_ij, (Q^T A)_ij
      for (int64_t k = 0; k < n; ++k) qtq += q[k * n + i] * q[k * n + j], r += q[k * n + i] * a[k * n + j];
      CHECK(std::abs(qtq - (i == j)) < 1e-14);
      if (i > j) CHECK(std::abs(r) < 1e-13);
      if (i == j) CHECK(r > 0);
    }
  CHECK(lapack::orthogonal_q(a, n) == q);  // bitwise repeatable
}

TEST_CASE("lapack wrappers: errors name the routine, the sizes and the bad value") {
  CHECK(error_of([] { lapack::singular_values({1, 2, 3}, 2, 2); }).find("dgesdd: 3 values for a 2 x 2") !=
        std::string::npos);
  CHECK_THROWS_AS(lapack::singular_values({1, 2, 3}, 2, 2), ShapeError);
  CHECK(error_of([] { lapack::symmetric_eigenvalues({1, NAN, NAN, 1}, 2); }).find("dsyevd: the matrix has a non-finite") !=
        std::string::npos);
  CHECK_THROWS_AS(lapack::orthogonal_q({1, INFINITY, 0, 1}, 2), ValueError);
  std::vector<double> short_v = {1, 0, 0};
  CHECK_THROWS_AS(lapack::cholesky(short_v, 2), ShapeError);
}

TEST_CASE("blas_description names OpenBLAS's kernel, blas_kernel_hint is silent once OPENBLAS_CORETYPE is set") {
  const std::string d = blas_description();
  CHECK(d.find("OpenBLAS") != std::string::npos);
  CHECK(d.find("(kernel ") != std::string::npos);
  const std::string hint = blas_kernel_hint();
  if (!hint.empty()) {  // this machine runs the fallback kernel: the hint names the fix
    CHECK(d.find("kernel Prescott") != std::string::npos);
    CHECK(hint.find("OPENBLAS_CORETYPE=") != std::string::npos);
  }
  const char* old = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = old ? old : "";
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  CHECK(blas_kernel_hint().empty());
  if (old)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
}

// CP-ALS (Kolda & Bader 2009, section 3.4). Each sweep solves three linear least-squares
// problems in turn; for A:
//
//   A = T_(1) (B (.) M) V^-1,  V = (M^T M) * (B^T B)   (* Hadamard, (.) Khatri-Rao)
//
// where T_(1) (B (.) M) is the einsum "aib,br,ir->ar" (never forming the Khatri-Rao product).
// einsum contracts left to right, so each operand order is chosen to keep the one
// intermediate at (I or K) x J x R: T = (D, h, D) has h << D in to_collaborative, and
// contracting the small mode first would make a D x D x R intermediate.
// A and M are normalised column-wise after their updates so that B carries the scale; this
// keeps the normal equations well scaled and does not change the fit. An extrapolating line
// search after each sweep (CPOptions::line_search) shortens ALS's plateaus.
#include "nn/attention/cp_decomposition.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/error.hpp"
#include "tensor/lapack.hpp"

namespace attnlab::nn {
namespace {

// Columns scaled to unit norm; zero columns stay zero.
Tensor normalize_columns(const Tensor& x) {
  Tensor norms = sqrt(sum(square(x), {0}, true));  // (1, R)
  return x / where(gt(norms, 0.0), norms, 1.0);
}

Tensor gram(const Tensor& x) { return matmul(transpose(x, 0, 1), x); }  // (R, R)

double frobenius(const Tensor& x) { return std::sqrt(sum(square(x)).item()); }

}  // namespace

Tensor solve_normal_equations(const Tensor& v, const Tensor& g) {
  if (v.dim() != 2 || v.size(0) != v.size(1) || g.dim() != 2 || g.size(1) != v.size(0))
    fail<ShapeError>("solve_normal_equations: expected V (R, R) and G (n, R), got V {} and G {}", to_string(v.shape()),
                     to_string(g.shape()));
  const int64_t R = v.size(0), n = g.size(0);
  const std::vector<double> vv = v.to_vector<double>();
  std::vector<double> x = g.to_vector<double>();  // (n, R), solved in place
  double mean_diag = 0;
  for (int64_t j = 0; j < R; ++j) mean_diag += vv[j * R + j] / R;
  for (double d : vv)
    if (!std::isfinite(d)) fail<ValueError>("solve_normal_equations: V has a non-finite entry");
  if (!(mean_diag > 0)) mean_diag = 1;  // V = 0: the ridge alone makes it invertible
  // Cholesky of V + ridge I (LAPACK dpotrf), the ridge growing tenfold until it succeeds.
  std::vector<double> L;
  for (double ridge = 1e-12 * mean_diag;; ridge *= 10) {
    L = vv;
    for (int64_t j = 0; j < R; ++j) L[j * R + j] += ridge;
    if (lapack::cholesky(L, R)) break;
  }
  lapack::cholesky_solve_right(L, R, x.data(), n);  // X (V + ridge I) = G, one dpotrs call
  return from_vector(x, {n, R});
}

Tensor cp_reconstruct(const Tensor& a, const Tensor& m, const Tensor& b) {
  return einsum("ar,ir,br->aib", {a, m, b});  // (I, J, K)
}

CPFactors cp_als(const Tensor& t_in, int64_t rank, const CPOptions& options) {
  if (!t_in.defined() || t_in.dim() != 3 || !t_in.is_floating_point())
    fail<ShapeError>(
        "cp_als: expected a floating 3-way tensor (I, J, K), got {}",
        t_in.defined() ? fmt::format("{} {}", to_string(t_in.shape()), dtype_name(t_in.dtype())) : "undefined");
  if (rank <= 0) fail<ValueError>("cp_als: rank must be positive, got {}", rank);
  if (options.max_iterations <= 0)
    fail<ValueError>("cp_als: max_iterations must be positive, got {}", options.max_iterations);
  if (!(options.tolerance >= 0)) fail<ValueError>("cp_als: tolerance must be >= 0, got {}", options.tolerance);
  NoGradGuard no_grad;
  const Tensor t = contiguous(to(t_in.detach(), kFloat64));  // (I, J, K)
  const int64_t I = t.size(0), J = t.size(1), K = t.size(2);
  CPFactors f;
  Generator gen(options.seed);
  f.a = randn({I, rank}, gen, kFloat64);
  f.m = randn({J, rank}, gen, kFloat64);
  f.b = randn({K, rank}, gen, kFloat64);
  const double norm_t = frobenius(t);
  if (norm_t == 0) {  // the best fit is zero; report it without iterating
    f.a = zeros({I, rank}, kFloat64);
    f.m = zeros({J, rank}, kFloat64);
    f.b = zeros({K, rank}, kFloat64);
    f.report = {0.0, 0, true};
    return f;
  }
  f.a = normalize_columns(f.a);
  f.m = normalize_columns(f.m);
  // The exact residual, not ||T||^2 - 2<T, T^> + ||T^||^2, whose cancellation would put a
  // floor of ~1e-8 under the reported error.
  auto relative_error = [&](const Tensor& a, const Tensor& m, const Tensor& b) {
    return frobenius(t - cp_reconstruct(a, m, b)) / norm_t;
  };
  Tensor prev_a, prev_m, prev_b;  // the factors after the previous sweep, for the line search
  double previous = std::numeric_limits<double>::infinity();
  for (int64_t it = 1; it <= options.max_iterations; ++it) {
    f.a = normalize_columns(solve_normal_equations(gram(f.m) * gram(f.b), einsum("aib,br,ir->ar", {t, f.b, f.m})));
    f.m = normalize_columns(solve_normal_equations(gram(f.a) * gram(f.b), einsum("aib,ar,br->ir", {t, f.a, f.b})));
    f.b = solve_normal_equations(gram(f.a) * gram(f.m), einsum("aib,ar,ir->br", {t, f.a, f.m}));
    double error = relative_error(f.a, f.m, f.b);
    if (options.line_search && prev_a.defined()) {
      const double jump = std::cbrt(double(it));
      Tensor a = prev_a + (f.a - prev_a) * jump, m = prev_m + (f.m - prev_m) * jump;
      Tensor b = prev_b + (f.b - prev_b) * jump;
      const double e = relative_error(a, m, b);
      if (e < error) {
        f.a = a, f.m = m, f.b = b;
        error = e;
      }
    }
    prev_a = f.a, prev_m = f.m, prev_b = f.b;
    f.report.relative_error = error;
    f.report.iterations = it;
    if (error < options.tolerance || std::abs(previous - error) < options.tolerance) {
      f.report.converged = true;
      break;
    }
    previous = error;
  }
  // Balance: unit mixing columns, the weight split evenly between a and b (signs stay in a
  // and b as they are).
  Tensor na = sqrt(sum(square(f.a), {0}, true)), nm = sqrt(sum(square(f.m), {0}, true));
  Tensor nb = sqrt(sum(square(f.b), {0}, true));  // (1, R) each
  Tensor w = sqrt(na * nm * nb);                  // (1, R)
  auto safe = [](const Tensor& n) { return where(gt(n, 0.0), n, 1.0); };
  f.a = f.a / safe(na) * w;
  f.m = f.m / safe(nm);
  f.b = f.b / safe(nb) * w;
  return f;
}

}  // namespace attnlab::nn

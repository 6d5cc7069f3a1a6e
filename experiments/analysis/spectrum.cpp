// Eigenvalues and singular-value spectra through LAPACK (spectrum.hpp).
#include "experiments/analysis/spectrum.hpp"

#include <algorithm>
#include <cmath>

#include "attnlab.hpp"
#include "tensor/lapack.hpp"

namespace attnlab::analysis {

std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n) {
  if (n < 0 || int64_t(a.size()) != n * n)
    fail<ValueError>("symmetric_eigenvalues: {} values for an n x n matrix with n = {} (expected n*n = {})", a.size(),
                     n, n * n);
  double scale = 0;
  for (double v : a) scale = std::max(scale, std::abs(v));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j)
      if (std::abs(a[i * n + j] - a[j * n + i]) > 1e-9 * std::max(scale, 1e-300))
        fail<ValueError>("symmetric_eigenvalues: the matrix is not symmetric: a[{},{}] = {} but a[{},{}] = {}", i, j,
                         a[i * n + j], j, i, a[j * n + i]);
  return lapack::symmetric_eigenvalues(std::move(a), n);
}

std::vector<double> singular_values(const Tensor& m) {
  if (m.dim() != 2) fail<ShapeError>("singular_values: expected a 2-D matrix, got shape {}", to_string(m.shape()));
  Tensor x = to(m.detach(), kFloat64);  // (r, c)
  // One orientation (wide) for both m and m^T, so that the two give bitwise the same values.
  if (x.size(0) > x.size(1)) x = transpose(x, 0, 1);
  return lapack::singular_values(contiguous(x).to_vector<double>(), x.size(0), x.size(1));
}

std::vector<double> cumulative_energy(const std::vector<double>& s) {
  double total = 0;
  for (double v : s) total += v * v;
  std::vector<double> c(s.size(), 1.0);
  if (total == 0) return c;
  double run = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    run += s[j] * s[j];
    c[j] = std::min(run / total, 1.0);
  }
  if (!c.empty()) c.back() = 1.0;
  return c;
}

int64_t energy_rank(const std::vector<double>& cumulative, double fraction) {
  for (size_t r = 0; r < cumulative.size(); ++r)
    if (cumulative[r] >= fraction) return int64_t(r) + 1;
  return int64_t(cumulative.size());
}

Tensor concat_qk_products(const Tensor& q_weight, const Tensor& k_weight, int64_t heads) {
  if (q_weight.dim() != 2 || q_weight.shape() != k_weight.shape() || heads <= 0 || q_weight.size(0) % heads != 0)
    fail<ShapeError>("concat_qk_products: q_weight {} and k_weight {} must be equal (h*dk, D) with h = {} dividing h*dk",
                     to_string(q_weight.shape()), to_string(k_weight.shape()), heads);
  const int64_t dk = q_weight.size(0) / heads;
  std::vector<Tensor> products;
  for (int64_t i = 0; i < heads; ++i) {
    Tensor wq = narrow(q_weight.detach(), 0, i * dk, dk);  // (dk, D)
    Tensor wk = narrow(k_weight.detach(), 0, i * dk, dk);  // (dk, D)
    products.push_back(matmul(transpose(wq, 0, 1), wk));   // (D, D)
  }
  return cat(products, 1);  // (D, h*D)
}

}  // namespace attnlab::analysis

// Tutorial 5: the low-rank bottleneck (seed 001; Bhojanapalli et al. 2020).
//
// A head's score matrix is S = Q K^T with Q (N, dk) and K (N, dk), so rank(S) <= dk. With the
// usual dk = D/h, more heads means smaller dk, and once dk < N there are attention patterns a
// head cannot express: a pattern whose logits need rank N (e.g. "each token attends to itself",
// logits c*I) can only be approximated, with error at least c*sqrt(N - dk) in Frobenius norm
// (Eckart-Young: the best rank-dk approximation of c*I drops N - dk singular values c).
// `mha(key_size=...)` decouples dk from D/h, which is the paper's fix.
//
// Below: the numerical rank of a real head's N x N scores (Gram-Schmidt), then Q and K fitted
// by gradient descent to the identity pattern, with dk = 2 and dk = N.
#include <cmath>

#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::show;

namespace {

// Numerical rank of a float64 matrix (r, c) by modified Gram-Schmidt on its rows, run twice per
// row for stability: a row adds to the rank when what is left of it after removing its
// projections on the earlier directions is longer than tol * (largest row norm).
int64_t numerical_rank(const Tensor& a, double tol = 1e-9) {
  const int64_t r = a.size(0), c = a.size(1);
  std::vector<double> m = contiguous(a).to_vector<double>();
  std::vector<std::vector<double>> basis;
  double scale = 0;
  for (int64_t i = 0; i < r; ++i) {
    double n = 0;
    for (int64_t j = 0; j < c; ++j) n += m[i * c + j] * m[i * c + j];
    scale = std::max(scale, std::sqrt(n));
  }
  for (int64_t i = 0; i < r; ++i) {
    std::vector<double> row(m.begin() + i * c, m.begin() + (i + 1) * c);
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& b : basis) {
        double d = 0;
        for (int64_t j = 0; j < c; ++j) d += row[j] * b[j];
        for (int64_t j = 0; j < c; ++j) row[j] -= d * b[j];
      }
    double n = 0;
    for (double v : row) n += v * v;
    n = std::sqrt(n);
    if (n > tol * scale) {
      for (double& v : row) v /= n;
      basis.push_back(row);
    }
  }
  return int64_t(basis.size());
}

// Fits Q, K (N, dk) by Adam so that Q K^T approaches `target` (N, N); returns ||Q K^T - target||_F.
double fit(const Tensor& target, int64_t dk, int steps) {
  const int64_t n = target.size(0);
  Generator gen(11);
  Tensor q = randn({n, dk}, gen, kFloat64, 0, 0.5).requires_grad_();
  Tensor k = randn({n, dk}, gen, kFloat64, 0, 0.5).requires_grad_();
  optim::Adam opt(std::vector<Tensor>{q, k}, {.lr = 0.05});
  for (int s = 0; s < steps; ++s) {
    Tensor loss = sum(square(matmul(q, transpose(k, 0, 1)) - target));
    optim::check_finite_loss(loss, "low-rank fit", s + 1);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  NoGradGuard ng;
  return std::sqrt(sum(square(matmul(q, transpose(k, 0, 1)) - target)).item());
}

}  // namespace

int main() {
  const int64_t N = 8, D = 16, dk = 2;
  manual_seed(5);
  tutorial::section("the rank of one head's scores");
  auto attn = nn::make_attention("mha(heads=4, key_size=2)", D);  // dk = 2 < N = 8
  attn->to(kFloat64);
  auto& mha = static_cast<nn::MultiHeadAttention&>(*attn);
  Generator gen(6);
  Tensor x = randn({N, D}, gen, kFloat64);                       // (N, D), one sequence
  Tensor q = narrow(mha.q_proj->forward(x), -1, 0, dk).detach();  // (N, dk) head 0
  Tensor k = narrow(mha.k_proj->forward(x), -1, 0, dk).detach();  // (N, dk)
  Tensor s = matmul(q, transpose(k, 0, 1));                      // (N, N)
  show("head 0 scores", s);
  const int64_t rank = numerical_rank(s);
  fmt::print("numerical rank of the {}x{} scores: {} (key size {})\n", N, N, rank, dk);
  check(rank <= dk, "rank(Q K^T) <= key_size");
  check(numerical_rank(eye(N, kFloat64)) == N, "the identity pattern needs rank N");

  tutorial::section("fitting the rank-N pattern 'attend to yourself' (logits c*I)");
  const double c = 4.0;
  Tensor target = eye(N, kFloat64) * c;  // (N, N)
  const double bound = c * std::sqrt(double(N - dk));
  const double small = fit(target, dk, 600), full = fit(target, N, 600);
  fmt::print("key size {}: error {:.4f} (Eckart-Young lower bound c*sqrt(N - dk) = {:.4f})\n", dk, small, bound);
  fmt::print("key size {}: error {:.4f}\n", N, full);
  check(small >= bound * (1 - 1e-6), "with key size 2 the error cannot go below c*sqrt(N - dk)");
  check(full < 0.05 * bound, "with key size N the same fit reaches the pattern (error < 5% of that bound)");
  return 0;
}

// Tutorial 5: the low-rank bottleneck (seed 001; Bhojanapalli et al. 2020).
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include <algorithm>
#include <cmath>

#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/lapack.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;
using tutorial::show;

namespace {

// Numerical rank of a float64 matrix (r, c): the number of singular values (LAPACK's SVD) above
// tol * (the largest).
int64_t numerical_rank(const Tensor& a, double tol = 1e-9) {
  const std::vector<double> s = lapack::singular_values(contiguous(a).to_vector<double>(), a.size(0), a.size(1));
  return std::count_if(s.begin(), s.end(), [&](double v) { return v > tol * s.front(); });
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

void lesson() {
  say("A head's score matrix is S = Q K^T with Q (N, dk) and K (N, dk), so rank(S) <= dk. With the\n"
      "usual dk = D/h, more heads means smaller dk, and once dk < N there are attention patterns a\n"
      "head cannot express exactly: logits that need rank N (e.g. c*I) can only be approximated,\n"
      "with error at least c*sqrt(N - dk) in Frobenius norm (Eckart-Young: the best rank-dk\n"
      "approximation of c*I drops N - dk singular values c). The bound is on the logits, not on the\n"
      "weights after softmax: \"each token attends to itself\" (P = I) is reached with dk = 2 by\n"
      "putting q[n] = k[n] on a circle of radius R, since the scores R^2 cos(angle n - angle m) are\n"
      "largest on the diagonal and softmax sharpens them as R grows. What a small dk loses is the\n"
      "freedom to set each logit; some patterns of weights survive by growing the norms.\n"
      "`mha(key_size=...)` decouples dk from D/h, which is the paper's fix.");
  say("Below: the numerical rank of a real head's N x N scores (by SVD), then Q and K fitted\n"
      "by gradient descent to the logits c*I, with dk = 2 and dk = N, then P = I with dk = 2.");
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

  tutorial::section("the weights 'attend to yourself' (P = I) with key size 2: q[n] = k[n] on a circle");
  const double radius = 8.0;
  Tensor angle = arange(0, N, 1, kFloat64) * (2 * M_PI / double(N));  // (N)
  Tensor on_circle = stack({cos(angle), sin(angle)}, -1) * radius;   // (N, 2) = q = k
  Tensor p = softmax(matmul(on_circle, transpose(on_circle, 0, 1)), -1);  // (N, N)
  const double off = max(abs(p - eye(N, kFloat64))).item();
  fmt::print("radius {}: max |P - I| = {:.2e}\n", radius, off);
  check(off < 1e-5, "with key size 2 the weights reach P = I to 1e-5 (only the logits c*I are out of reach)");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 5: the low-rank bottleneck (seed 001; Bhojanapalli et al. 2020).", lesson);
}

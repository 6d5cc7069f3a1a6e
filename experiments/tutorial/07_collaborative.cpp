// Tutorial 7: collaborative heads and the CP decomposition (seed 000; Cordonnier et al. 2020).
// The lesson's explanation is printed as it runs (tutorial::say); --help prints the usage.
#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/collaborative.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

void lesson() {
  say("Head i of mha scores with the bilinear form x[n]^T (Wq_i^T Wk_i) x[m]. Stacking the h forms\n"
      "gives a (D, h, D) tensor T. Collaborative attention writes every form with one shared pair of\n"
      "projections of width Dk~ and a per-head mixing vector:\n"
      "  T[a, i, b] ~= sum_r A[a, r] M[i, r] B[b, r]      (a rank-Dk~ CP decomposition)\n"
      "so the heads share key/query dimensions instead of each owning dk of them. `to_collaborative`\n"
      "fits the decomposition to an mha layer: here one with random weights, which shows the\n"
      "algebra; `attnlab run collab_compress` fits trained layers (docs/results/collaborative_compress).\n"
      "With Dk~ = h*dk the concatenated layout is exact; smaller Dk~ compresses, and the fit's error\n"
      "grows as Dk~ shrinks.");
  const int64_t D = 12, h = 3, dk = 4;
  manual_seed(7);
  auto attn = nn::make_attention("mha(heads=3, key_size=4)", D);
  attn->to(kFloat64);
  attn->eval();
  auto& mha = static_cast<nn::MultiHeadAttention&>(*attn);
  Generator gen(8);
  Tensor x = randn({2, 6, D}, gen, kFloat64);  // (B, N, D)
  Tensor y = attn->forward(x).output;          // (B, N, D)

  fmt::print("mha: h = {}, dk = {}, so the concatenated key width h*dk = {}\n", h, dk, h * dk);
  fmt::print("{:>6}  {:>14}  {:>10}  {:>16}\n", "Dk~", "CP rel. error", "sweeps", "max |y_co - y|");
  std::vector<double> errors;
  for (int64_t dks : {1, 2, 4, 6, 8, 12}) {
    nn::CPOptions opt;
    opt.max_iterations = 300;
    nn::CPReport report;
    auto co = nn::to_collaborative(mha, dks, opt, &report);
    const double out_err = tutorial::max_abs_diff(co->forward(x).output, y);
    fmt::print("{:>6}  {:>14.3e}  {:>10}  {:>16.3e}\n", dks, report.relative_error, report.iterations, out_err);
    errors.push_back(report.relative_error);
    if (dks == h * dk) check(report.relative_error == 0 && out_err < 1e-10, "Dk~ = h*dk is exact (error 0, same output)");
  }
  bool falling = true;
  for (size_t i = 1; i < errors.size(); ++i) falling &= errors[i] <= errors[i - 1] + 1e-6;
  check(falling, "the CP error falls (never rises) as the shared key size grows");
  check(errors.front() > 0.1, "a much smaller Dk~ cannot represent the heads exactly");
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 7: collaborative heads and the CP decomposition (seed 000; Cordonnier et al. 2020).", lesson);
}

// fnet (docs/attention.md, "fnet"; Lee-Thorp et al. 2021): the FFTW path against a plain DFT
// written with loops, float32 against float64, the self-adjoint backward, gradcheck, the plan
// cache under threads, errors, the golden case and the docs example.
#include <thread>

#include "kernelmix_testing.hpp"
#include "nn/attention/fnet.hpp"
#include "nn/attention/kernels/fourier_mix.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::kernelmix;
using nn::make_attention;

namespace {

// y[b, n, d] = Re sum_{j, k} x[b, j, k] exp(-2 pi i (n j / N + d k / D))
//            = sum_{j, k} x[b, j, k] cos(2 pi (n j / N + d k / D))
Tensor naive_fnet(const Tensor& x) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2);
  auto xv = x.to_vector<double>();
  std::vector<double> y(B * N * D, 0.0);
  const double two_pi = 2 * std::acos(-1.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < D; ++k)
            acc += xv[(b * N + j) * D + k] * std::cos(two_pi * (double((n * j) % N) / N + double((d * k) % D) / D));
        y[(b * N + n) * D + d] = acc;
      }
  return from_vector(y, {B, N, D});
}

}  // namespace

TEST_CASE("fnet equals a plain DFT written with loops (float64), odd and even sizes") {
  for (auto [N, D] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 6}, {5, 6}, {6, 5}, {7, 9}, {8, 16}}) {
    CAPTURE(N);
    CAPTURE(D);
    auto a = make_attention("fnet", D);
    Generator g(N * 100 + D);
    Tensor x = randn({3, N, D}, g, kFloat64);
    auto r = a->forward(x, {}, {}, false, /*need_weights=*/true);
    CHECK(allclose(r.output, naive_fnet(x), 1e-10, 1e-10));
    CHECK_FALSE(r.attention.defined());  // fnet has no attention probabilities
  }
  // a non-contiguous input
  Generator g(1);
  Tensor xt = transpose(randn({2, 6, 5}, g, kFloat64), 1, 2);  // (2, 5, 6)
  CHECK(allclose(nn::fourier::fourier_mix(xt), naive_fnet(contiguous(xt)), 1e-10, 1e-10));
}

TEST_CASE("fnet float32 agrees with float64") {
  Generator g(2);
  Tensor x = randn({2, 33, 20}, g);
  Tensor y32 = nn::fourier::fourier_mix(x), y64 = nn::fourier::fourier_mix(to(x, kFloat64));
  CHECK(y32.dtype() == kFloat32);
  CHECK(allclose(y32, y64, 1e-4, 1e-3));
}

TEST_CASE("fnet backward is the same transform (self-adjoint), and gradcheck passes") {
  Generator g(3);
  Tensor x = randn({2, 5, 6}, g, kFloat64).requires_grad_();
  Tensor gout = randn({2, 5, 6}, g, kFloat64);
  auto a = make_attention("fnet()", 6);
  a->forward(x).output.backward(gout);
  CHECK(allclose(x.grad(), naive_fnet(gout), 1e-10, 1e-10));
  for (auto [N, D] : std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {5, 3}, {1, 4}}) {
    auto layer = make_attention("fnet", D);
    auto r = gradcheck_layer(*layer, randn({2, N, D}, g, kFloat64));
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("fnet: plans are cached and safe to use from several threads at once") {
  // Each thread plans and runs shapes the others also use; every result must match the serial one.
  std::vector<Tensor> xs, want;
  Generator g(4);
  for (int i = 0; i < 8; ++i) {
    xs.push_back(randn({2, 10 + i % 3, 12 + i % 4}, g, i % 2 ? kFloat64 : kFloat32));
    want.push_back(to(naive_fnet(to(xs.back(), kFloat64)), xs.back().dtype()));
  }
  std::vector<Tensor> got(xs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < xs.size(); ++i)
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) got[i] = nn::fourier::fourier_mix_kernel(xs[i]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < xs.size(); ++i) CHECK(allclose(got[i], want[i], 1e-4, 1e-3));
}

TEST_CASE("fnet: no parameters, no heads, causal, masks, context and pruning are errors") {
  auto a = make_attention("fnet()", 8);
  CHECK(a->named_parameters().empty());
  CHECK(a->named_buffers().empty());
  CHECK(a->spec() == "fnet");  // no options: the bare name
  CHECK(a->l0_penalty().item() == 0.0);
  CHECK(error_of([] { make_attention("fnet(causal=true)", 8); }).find("fnet is not causal") != std::string::npos);
  CHECK(error_of([] { make_attention("fnet(heads=2)", 8); }).find("unknown option heads") != std::string::npos);
  Tensor x = zeros({1, 3, 8});
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("fnet: causal=true is not allowed") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, ones({1, 1, 1, 3}, kBool)); }).find("fnet: takes no mask") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, zeros({1, 2, 8})); }).find("fnet: self-attention only") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 3, 6})); }).find("input must be (B, N, 8)") != std::string::npos);
  CHECK(error_of([&] { a->prune_heads({0}); }).find("no heads") != std::string::npos);
  CHECK(error_of([&] { nn::fourier::fourier_mix(zeros({3, 8}, kFloat64)); }).find("(B, N, D)") != std::string::npos);
}

TEST_CASE("fnet golden: torch.fft, odd N, even D") { run_golden_case("fnet"); }

TEST_CASE("docs/attention.md: the fnet example compiles and runs") {
  auto mix = nn::make_attention("fnet()", 32);
  Generator gen(1);
  Tensor x = randn({2, 1000, 32}, gen).requires_grad_();  // (B, N, D)
  Tensor y = mix->forward(x).output;                      // (2, 1000, 32) = Re(FFT_N(FFT_D(x)))
  sum(y).backward();                                      // dL/dx = Re(FFT_N(FFT_D(dL/dy)))
  CHECK(y.shape() == Dims{2, 1000, 32});
  CHECK(x.grad().shape() == Dims{2, 1000, 32});
}

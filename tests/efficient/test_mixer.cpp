// mixer (docs/attention.md, "mixer"; Tolstikhin et al. 2021, the token-mixing MLP): the layer
// against its plain formula with loops, gradchecks, names and shapes, errors, the golden cases
// and the docs example.
#include "kernelmix_testing.hpp"
#include "nn/attention/mixer.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::kernelmix;
using nn::make_attention;

namespace {

double gelu_tanh(double z) {
  const double c = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * z * (1 + std::tanh(c * (z + 0.044715 * z * z * z)));
}

// y[b, :, c] = w2[:N] gelu(w1[:, :N] x[b, :, c] + b1) + b2[:N], with plain loops.
Tensor naive_mixer(const nn::Mixer& m, const Tensor& x) {
  const int64_t B = x.size(0), N = x.size(1), D = x.size(2), L = m.max_len, H = m.hidden;
  auto xv = x.to_vector<double>();
  auto w1 = m.token_mlp->w1->weight.to_vector<double>(), w2 = m.token_mlp->w2->weight.to_vector<double>();
  std::vector<double> b1(H, 0.0), b2(L, 0.0);
  if (m.bias) b1 = m.token_mlp->w1->bias.to_vector<double>(), b2 = m.token_mlp->w2->bias.to_vector<double>();
  std::vector<double> y(B * N * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < D; ++c) {
      std::vector<double> hid(H);
      for (int64_t j = 0; j < H; ++j) {
        double acc = b1[j];
        for (int64_t n = 0; n < N; ++n) acc += w1[j * L + n] * xv[(b * N + n) * D + c];
        hid[j] = gelu_tanh(acc);
      }
      for (int64_t n = 0; n < N; ++n) {
        double acc = b2[n];
        for (int64_t j = 0; j < H; ++j) acc += w2[n * H + j] * hid[j];
        y[(b * N + n) * D + c] = acc;
      }
    }
  return from_vector(y, {B, N, D});
}

}  // namespace

TEST_CASE("mixer equals its plain formula, N < max_len and N = max_len, with and without biases") {
  for (std::string spec : {"mixer(max_len=8, hidden=6)", "mixer(max_len=5, hidden=3, bias=false)"}) {
    CAPTURE(spec);
    auto a = float64_layer(spec);
    auto& m = dynamic_cast<nn::Mixer&>(*a);
    Generator g(31);
    for (int64_t N : {1, 3, 5}) {
      Tensor x = randn({2, N, 8}, g, kFloat64);
      auto r = a->forward(x, {}, {}, false, true);
      CHECK(allclose(r.output, naive_mixer(m, x), 1e-10, 1e-12));
      CHECK_FALSE(r.attention.defined());
    }
  }
}

TEST_CASE("mixer gradcheck: with and without biases, N < max_len") {
  for (std::string spec : {"mixer(max_len=6, hidden=4)", "mixer(max_len=4, hidden=5, bias=false)"}) {
    CAPTURE(spec);
    auto a = float64_layer(spec, 5);
    Generator g(32);
    auto r = gradcheck_layer(*a, randn({2, 3, 5}, g, kFloat64));
    CHECK_MESSAGE(r.ok, r.message);
  }
  // positions >= N get no gradient
  auto a = float64_layer("mixer(max_len=6, hidden=4)", 5);
  Generator g(33);
  sum(a->forward(randn({2, 3, 5}, g, kFloat64)).output).backward();
  auto& m = dynamic_cast<nn::Mixer&>(*a);
  for (double v : narrow(m.token_mlp->w1->weight.grad(), 1, 3, 3).to_vector<double>()) CHECK(v == 0.0);
  for (double v : narrow(m.token_mlp->w2->bias.grad(), 0, 3, 3).to_vector<double>()) CHECK(v == 0.0);
}

TEST_CASE("mixer: parameter names and shapes follow the spec") {
  auto a = make_attention("mixer(max_len=16, hidden=6)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"token_mlp.w1.weight(6,16)", "token_mlp.w1.bias(6)",
                                          "token_mlp.w2.weight(16,6)", "token_mlp.w2.bias(16)"});
  CHECK(a->named_buffers().empty());
  auto nb = make_attention("mixer(max_len=16, hidden=6, bias=false)", 8);
  CHECK(nb->named_parameters().size() == 2);
  auto d = make_attention("mixer", 8);
  CHECK(d->spec() == "mixer(max_len=512, hidden=256, bias=true)");
  CHECK(d->get_parameter("token_mlp.w1.weight").shape() == Dims{256, 512});
}

TEST_CASE("mixer errors: N > max_len, causal, masks, context, pruning, bad options") {
  auto a = make_attention("mixer(max_len=4, hidden=3)", 8);
  CHECK(error_of([&] { a->forward(zeros({1, 5, 8})); }).find("N=5 exceeds max_len=4") != std::string::npos);
  CHECK_NOTHROW(a->forward(zeros({1, 4, 8})));
  Tensor x = zeros({1, 3, 8});
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("mixer: causal=true is not allowed") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, ones({1, 1, 3, 3}, kBool)); }).find("mixer: takes no mask") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, zeros({1, 3, 8})); }).find("mixer: self-attention only") != std::string::npos);
  CHECK(error_of([&] { a->prune_heads({0}); }).find("no heads") != std::string::npos);
  CHECK(error_of([] { make_attention("mixer(causal=true)", 8); }).find("mixer is not causal") != std::string::npos);
  CHECK(error_of([] { make_attention("mixer(max_len=0)", 8); }).find("max_len") != std::string::npos);
  CHECK(error_of([] { make_attention("mixer(hidden=-2)", 8); }).find("hidden") != std::string::npos);
  CHECK(error_of([] { make_attention("mixer(gate=hard_concrete)", 8); }).find("unknown option gate") !=
        std::string::npos);
}

TEST_CASE("mixer golden: N < max_len, biases") { run_golden_case("mixer"); }
TEST_CASE("mixer golden: bias=false, N = max_len") { run_golden_case("mixer_no_bias"); }

TEST_CASE("kernelmix golden: the file and the tests name the same cases") {
  const std::vector<std::string> here = {"linear_cross_keymask", "linear_causal_gate", "linear_general_mask",
                                         "performer_ortho_pad",  "performer_causal",   "performer_cross_general",
                                         "fnet",                 "mixer",              "mixer_no_bias"};
  check_golden_cases(golden(), here);
}

TEST_CASE("docs/attention.md: the mixer example compiles and runs") {
  manual_seed(0);
  auto mix = nn::make_attention("mixer(max_len=128, hidden=64)", 32);
  Generator gen(1);
  Tensor x = randn({2, 100, 32}, gen);   // (B, N, D), N <= max_len
  Tensor y = mix->forward(x).output;     // (2, 100, 32)
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 100, 32});
}

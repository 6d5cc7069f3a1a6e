// Autocast (autograd/autocast.hpp): matmul in an AutocastGuard(kBFloat16) scope against its
// float32 twin, forward and backward, the gradients float32; linear layers and a small MLP's
// loss and parameter gradients within bf16 tolerances; float64 never cast; nesting and the
// float32 region; the policy from ATTNLAB_AUTOCAST. In a build without oneDNN the guard stays
// float32, and the same tests check that results are float32's, bit for bit.
#include <cmath>
#include <cstdlib>

#include <optional>

#include "helpers.hpp"
#include "tensor/kernels.hpp"
#include "tensor/tensor_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

Tensor leaf(const Dims& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, g, kFloat32).requires_grad_();
}

Tensor round_bf16(const Tensor& x) { return kernels::to_dtype(kernels::to_dtype(x, kBFloat16), kFloat32); }

struct Grads3 {
  Tensor y, ga, gb;
};

// y = a @ b and the gradients of sum(y * w) for a fixed random w.
Grads3 product_and_grads(const Tensor& a0, const Tensor& b0, const Tensor& w) {
  Tensor a = a0.detach().requires_grad_(), b = b0.detach().requires_grad_();
  Tensor y = matmul(a, b);
  sum(mul(y, w)).backward();
  return {y.detach(), a.grad(), b.grad()};
}

}  // namespace

TEST_CASE("autocast: matmul forward and backward match the bf16 twin and the float32 product") {
  for (auto [ashape, bshape] : {std::pair<Dims, Dims>{{6, 32}, {32, 5}}, {{2, 3, 7, 16}, {16, 9}},
                                std::pair<Dims, Dims>{{4, 8, 16}, {4, 16, 8}}, {{2, 1, 5, 16}, {3, 16, 6}}}) {
    INFO(to_string(ashape), " @ ", to_string(bshape));
    Tensor a = leaf(ashape, 1), b = leaf(bshape, 2);
    Tensor w = kernels::matmul(a.detach(), b.detach());  // the upstream gradient's shape
    { Generator g(3); w = randn(w.shape(), g, kFloat32); }
    Grads3 f32 = product_and_grads(a, b, w);
    AutocastGuard guard(kBFloat16, AutocastPolicy::Force);
    CHECK(guard.bf16() == onednn_built());
    Grads3 got = product_and_grads(a, b, w);
    CHECK(got.y.dtype() == kFloat32);
    CHECK(got.ga.dtype() == kFloat32);
    CHECK(got.gb.dtype() == kFloat32);
    if (!guard.bf16()) {  // no oneDNN: float32 throughout
      CHECK(bitwise_equal(got.y, f32.y));
      CHECK(bitwise_equal(got.ga, f32.ga));
      CHECK(bitwise_equal(got.gb, f32.gb));
      continue;
    }
    // The twin: the same products of rounded operands in float32 (w rounded as the gradient is).
    AutocastGuard off(kFloat32);
    Grads3 twin = product_and_grads(round_bf16(a.detach()), round_bf16(b.detach()), round_bf16(w));
    CHECK(vec_close(got.y.to_vector<double>(), twin.y.to_vector<double>(), 1e-5, 1e-4));
    CHECK(rel_norm_err(got.ga, twin.ga) < 1e-5);
    CHECK(rel_norm_err(got.gb, twin.gb) < 1e-5);
    // Against the float32 product: bf16 rounding of each operand, about 2^-8.
    CHECK(rel_norm_err(got.y, f32.y) < 1e-2);
    CHECK(rel_norm_err(got.ga, f32.ga) < 1e-2);
    CHECK(rel_norm_err(got.gb, f32.gb) < 1e-2);
  }
}

TEST_CASE("autocast: x @ transpose(w), a Linear's product: w's gradient comes back contiguous, equal to the bf16 twin") {
  // The transposed weight is rounded in its own memory order and its gradient computed in the
  // weight's (out, in) layout, as in float32: .grad adopts it without a transposed copy.
  for (const Dims& xs : {Dims{5, 16}, Dims{2, 3, 16}, Dims{2, 2, 3, 16}}) {
    CAPTURE(to_string(xs));
    Tensor x = leaf(xs, 11), w = leaf({6, 16}, 12);  // w: (out, in), contiguous
    Tensor g;
    { Generator gen(13); g = randn(kernels::matmul(x.detach(), transpose(w.detach(), 0, 1)).shape(), gen, kFloat32); }
    AutocastGuard guard(kBFloat16, AutocastPolicy::Force);
    Tensor y = matmul(x, transpose(w, 0, 1));  // (..., 6)
    y.backward(g);
    REQUIRE(w.grad().shape() == Dims{6, 16});
    CHECK(w.grad().dtype() == kFloat32);
    CHECK(w.grad().is_contiguous());
    // The twin: float32 products of the rounded operands (g rounded as the gradient is).
    const int64_t rows = x.numel() / 16;
    Tensor xr = round_bf16(x.detach()), wr = round_bf16(w.detach()), gr = guard.bf16() ? round_bf16(g) : g;
    if (!guard.bf16()) xr = x.detach(), wr = w.detach();
    AutocastGuard off(kFloat32);
    Tensor want_y = kernels::matmul(xr, transpose(wr, 0, 1));
    Tensor want_gw = kernels::matmul(transpose(reshape(gr, {rows, 6}), 0, 1), reshape(xr, {rows, 16}));  // (6, 16)
    CHECK(rel_norm_err(y.detach(), want_y) < 1e-5);
    CHECK(rel_norm_err(w.grad(), want_gw) < 1e-5);
  }
}

TEST_CASE("autocast: an MLP's loss and float32 parameter gradients stay within bf16 tolerance") {
  auto run = [](bool bf16) {
    Generator g(7);
    nn::Linear l1(32, 64), l2(64, 10);
    l1.reset_parameters(g);
    l2.reset_parameters(g);
    Tensor x = randn({16, 32}, g, kFloat32);
    Tensor target = randint(0, 10, {16}, g);
    std::optional<AutocastGuard> guard;
    if (bf16) guard.emplace(kBFloat16, AutocastPolicy::Force);
    Tensor loss = nn::cross_entropy(l2.forward(gelu(l1.forward(x))), target);  // softmax and loss in float32
    CHECK(loss.dtype() == kFloat32);
    loss.backward();
    std::vector<Tensor> grads;
    for (auto& [name, p] : l1.named_parameters()) grads.push_back(p.grad());
    for (auto& [name, p] : l2.named_parameters()) grads.push_back(p.grad());
    return std::pair{loss.item(), grads};
  };
  auto [l32, g32] = run(false);
  auto [l16, g16] = run(true);
  CHECK(std::abs(l16 - l32) < 1e-2 * std::abs(l32));
  REQUIRE(g16.size() == g32.size());
  for (size_t i = 0; i < g32.size(); ++i) {
    CHECK(g16[i].dtype() == kFloat32);
    CHECK(rel_norm_err(g16[i], g32[i]) < 3e-2);
  }
}

TEST_CASE("autocast: float64 is never cast, nested guards restore, AutocastGuard(kFloat32) leaves the scope") {
  Tensor a = leaf64({4, 8}, 1), b = leaf64({8, 3}, 2);
  Tensor want = matmul(a, b).detach();
  {
    AutocastGuard guard(kBFloat16, AutocastPolicy::Force);
    CHECK(bitwise_equal(matmul(a, b).detach(), want));
    {
      AutocastGuard inner(kFloat32);
      CHECK(!AutocastMode::is_enabled());
    }
    CHECK(AutocastMode::is_enabled() == onednn_built());
    {
      AutocastGuard off(kBFloat16, AutocastPolicy::Off);
      CHECK(!off.bf16());
    }
    CHECK(AutocastMode::is_enabled() == onednn_built());
  }
  CHECK(!AutocastMode::is_enabled());
  CHECK(error_of([] { AutocastGuard g(kFloat64); }).find("bfloat16") != std::string::npos);
}

TEST_CASE("autocast: the decision follows the build, the CPU and ATTNLAB_AUTOCAST") {
  const AutocastDecision native = autocast_decision(AutocastPolicy::Native);
  const AutocastDecision force = autocast_decision(AutocastPolicy::Force);
  INFO(native.reason);
  CHECK(native.bf16 == (onednn_built() && cpu_has_native_bf16()));
  CHECK(force.bf16 == onednn_built());
  CHECK(!autocast_decision(AutocastPolicy::Off).bf16);
  CHECK(native.reason.find(native.bf16 ? "bf16" : "float32") == 0);
  if (onednn_built()) CHECK(native.reason.find(cpu_bf16_summary()) != std::string::npos);  // the CPU's flags are named
  const char* saved = std::getenv("ATTNLAB_AUTOCAST");
  const std::string keep = saved ? saved : "";
  setenv("ATTNLAB_AUTOCAST", "force", 1);
  CHECK(autocast_policy_from_env() == AutocastPolicy::Force);
  setenv("ATTNLAB_AUTOCAST", "off", 1);
  CHECK(autocast_policy_from_env() == AutocastPolicy::Off);
  setenv("ATTNLAB_AUTOCAST", "fast", 1);
  CHECK(contains_all(error_of([] { autocast_policy_from_env(); }), {"ATTNLAB_AUTOCAST=fast", "native, force or off"}));
  if (saved) setenv("ATTNLAB_AUTOCAST", keep.c_str(), 1);
  else unsetenv("ATTNLAB_AUTOCAST");
}

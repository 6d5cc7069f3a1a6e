// The fused softmax / log_softmax kernels (tensor/kernels/softmax.cpp, with hand-written
// backward) against their twins softmax_reference / log_softmax_reference (autograd/ops.hpp),
// composed from primitives as exp(x - logsumexp(x)) and x - logsumexp(x), in value and in
// gradient (docs/conventions.md, "Few primitives" and "Each fast path keeps a naive twin").
#include <limits>

#include "grad_helpers.hpp"

namespace {

using namespace attnlab;
using namespace attnlab::testing;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Value and gradient (for one random upstream gradient) of f at a fresh copy of x.
std::pair<Tensor, Tensor> value_and_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0,
                                         const Tensor& upstream) {
  Tensor x = x0.detach();  // keeps x0's strides
  x.requires_grad_();
  Tensor y = f(x);
  y.backward(upstream);
  return {y.detach(), x.grad()};
}

void compare(const char* what, const Tensor& x, int64_t dim, const Tensor& mask, double tol) {
  Generator g(77);
  Tensor up = to(randn(x.shape(), g, kFloat64), x.dtype());
  // A masked log_softmax output is the constant -inf: the fused backward sends nothing from it,
  // while the composed z - logsumexp(z) passes its upstream gradient into the logsumexp. Zero
  // upstream there, the case that arises in practice, so that both are well defined and equal.
  if (mask.defined()) up = masked_fill(up, logical_not(mask), 0.0);
  for (bool log_form : {false, true}) {
    CAPTURE(what);
    CAPTURE(log_form);
    auto fused = value_and_grad(
        [&](const Tensor& t) { return log_form ? log_softmax(t, dim, mask) : softmax(t, dim, mask); }, x, up);
    auto composed = value_and_grad(
        [&](const Tensor& t) {
          return log_form ? log_softmax_reference(t, dim, mask) : softmax_reference(t, dim, mask);
        },
        x, up);
    CHECK(allclose(fused.first, composed.first, tol, tol));
    CHECK(allclose(fused.second, composed.second, tol, tol));
  }
}

TEST_CASE("fused softmax and log_softmax equal exp(x - logsumexp(x)) in value and gradient") {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    const double tol = dtype == kFloat64 ? 1e-10 : 2e-5;
    Generator g(5);
    Tensor x = to(randn({2, 3, 5}, g, kFloat64, 0.0, 3.0), dtype);
    compare("dim -1", x, -1, {}, tol);
    compare("dim 1", x, 1, {}, tol);
    compare("dim 0", x, 0, {}, tol);
    compare("non-contiguous input", transpose(x, 0, 2), 1, {}, tol);
    // Large logits: both forms must subtract the max.
    compare("large logits", x * 200.0, -1, {}, dtype == kFloat64 ? 1e-9 : 1e-3);
  }
}

TEST_CASE("masked fused softmax equals the composed form on rows with something allowed") {
  Generator g(6);
  Tensor x = randn({2, 3, 4}, g, kFloat64);
  // Every row keeps at least one entry (the composed form is NaN on an empty row).
  Tensor mask = from_vector(std::vector<bool>{true, false, true, true,  //
                                              false, true, false, false,  //
                                              true, true, false, true},
                            {3, 4});
  compare("mask (3, 4) dim -1", x, -1, mask, 1e-10);
  Tensor row_mask = from_vector(std::vector<bool>{false, true, true, false}, {4});
  compare("mask (4) dim -1", x, -1, row_mask, 1e-10);
  Tensor col_mask = from_vector(std::vector<bool>{true, false, true}, {3, 1});
  compare("mask (3, 1) dim 1", x, 1, col_mask, 1e-10);
}

TEST_CASE("softmax of -inf logits: fused and composed agree, masked entries get zero gradient") {
  // Masking by -inf logits instead of a mask argument.
  Tensor x0 = t64({0.5, -kInf, 1.5, -kInf, 2.0, 0.0}, {2, 3});
  Tensor up = t64({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  auto fused = value_and_grad([](const Tensor& t) { return softmax(t, -1); }, x0, up);
  auto composed = value_and_grad([](const Tensor& t) { return softmax_reference(t, -1, {}); }, x0, up);
  CHECK(allclose(fused.first, composed.first, 1e-12, 1e-12));
  CHECK(allclose(fused.second, composed.second, 1e-12, 1e-12));
  CHECK(fused.first.at({0, 1}) == 0.0);
  CHECK(fused.second.at({0, 1}) == 0.0);
  CHECK(fused.second.at({1, 0}) == 0.0);
}

}  // namespace

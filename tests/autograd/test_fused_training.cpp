// The fused training-step ops (layer_norm, add_layer_norm, bias_gelu; kernels/fused.cpp):
// float64 gradient checks on non-contiguous and broadcast inputs, agreement with their composed
// twins in float32 and float64 (values and every gradient), the same weight and bias
// gradients for any thread count, the composed path under ConservativeMode, and typed errors.
// PyTorch's F.layer_norm and F.gelu are compared in test_golden.cpp.
#include "grad_helpers.hpp"
#include "tensor/parallel.hpp"

namespace {

using namespace attnlab;
using namespace attnlab::testing;
using In = const std::vector<Tensor>&;

// A leaf copy of x (keeping its strides) in `dtype`.
Tensor leaf_as(const Tensor& x, DType dtype) {
  Tensor t = to(x, dtype).detach();
  if (dtype == x.dtype()) t = clone(x).detach();
  t.requires_grad_();
  return t;
}

// Values of f and the gradients of every input, for one upstream gradient.
std::vector<Tensor> value_and_grads(const std::function<Tensor(In)>& f, const std::vector<Tensor>& inputs,
                                    DType dtype, uint64_t seed) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.defined() ? leaf_as(t, dtype) : Tensor());
  Tensor y = f(leaves);
  Generator g(seed);
  y.backward(to(randn(y.shape(), g, kFloat64), dtype));
  std::vector<Tensor> out{y.detach()};
  for (const Tensor& t : leaves)
    if (t.defined()) out.push_back(t.grad());
  return out;
}

// f_fused and f_composed agree on the inputs in `dtype` (value and every input gradient).
void check_twins(const char* what, const std::function<Tensor(In)>& fused, const std::function<Tensor(In)>& composed,
                 const std::vector<Tensor>& inputs, DType dtype, double tol) {
  CAPTURE(what);
  CAPTURE(dtype_name(dtype));
  auto a = value_and_grads(fused, inputs, dtype, 11), b = value_and_grads(composed, inputs, dtype, 11);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);  // 0: the value, then each input's gradient
    REQUIRE(a[i].defined());
    CHECK(a[i].dtype() == dtype);
    CHECK(allclose(a[i], b[i], tol, tol));
  }
}

Tensor ln_fused(In x) { return layer_norm(x[0], x[1], x[2], 1e-5); }
Tensor ln_composed(In x) { return layer_norm_reference(x[0], x[1], x[2], 1e-5); }
// Both outputs of add_layer_norm, stacked, so that one upstream gradient reaches both.
Tensor add_ln_fused(In x) {
  AddLayerNorm a = add_layer_norm(x[0], x[1], x[2], x[3], 1e-5);
  return stack({a.sum, a.normed});
}
Tensor add_ln_composed(In x) {
  Tensor s = x[0] + x[1];
  return stack({s, layer_norm_reference(s, x[2], x[3], 1e-5)});
}

TEST_CASE("fused layer_norm, add_layer_norm and bias_gelu pass float64 gradcheck") {
  // (3, 5) rows: D = 5 runs only the lanes' tails; D = 19 both the lanes and the tail.
  for (int64_t D : {5, 19}) {
    CAPTURE(D);
    Tensor x = nc_randn({3, D}, 1), w = nc_randn({D}, 2), b = nc_randn({D}, 3);
    check_grad("layer_norm", ln_fused, {x, w, b});
    check_grad("layer_norm, weight only", [](In in) { return layer_norm(in[0], in[1], {}, 1e-5); }, {x, w});
    check_grad("layer_norm, bias only", [](In in) { return layer_norm(in[0], {}, in[1], 1e-5); }, {x, b});
    check_grad("layer_norm, no affine", [](In in) { return layer_norm(in[0], {}, {}, 0.1); }, {x});
    // A zero-stride input (every row the same memory) and a 3-d one.
    Tensor row = nc_randn({1, D}, 4);
    check_grad("layer_norm of an expanded input",
               [](In in) { return layer_norm(expand(in[0], {3, -1}), in[1], in[2], 1e-5); }, {row, w, b});
    check_grad("layer_norm 3-d", ln_fused, {nc_randn({2, 2, D}, 5), w, b});
    // The residual broadcast over the leading dim: its gradient is reduced by the engine.
    check_grad("add_layer_norm, broadcast residual", add_ln_fused, {nc_randn({2, 3, D}, 6), nc_randn({3, D}, 7), w, b});
    check_grad("add_layer_norm, no affine",
               [](In in) {
                 AddLayerNorm a = add_layer_norm(in[0], in[1], {}, {}, 1e-5);
                 return a.sum * a.normed;
               },
               {nc_randn({3, D}, 8), nc_randn({3, D}, 9)});
    for (const char* approx : {"none", "tanh"}) {
      CAPTURE(approx);
      Tensor h = nc_randn({2, 3, D}, 10), hb = nc_randn({D}, 12);
      check_grad("bias_gelu", [approx](In in) { return bias_gelu(in[0], in[1], approx); }, {h, hb});
      check_grad("bias_gelu of an expanded input",
                 [approx](In in) { return bias_gelu(expand(in[0], {4, -1}), in[1], approx); }, {nc_randn({1, D}, 13), hb});
    }
  }
}

TEST_CASE("fused layer_norm and add_layer_norm equal the composed twin in float32 and float64") {
  Generator g(3);
  // D = 40 (lanes and a tail) and 64 (lanes only), 28 rows (a partial block of the backward).
  for (int64_t D : {40, 64}) {
    CAPTURE(D);
    Tensor x = randn({4, 7, D}, g, kFloat64, 0.5, 2.0), r = randn({7, D}, g, kFloat64);
    Tensor w = randn({D}, g, kFloat64, 1.0, 0.3), b = randn({D}, g, kFloat64, 0.0, 0.3);
    for (DType dt : {kFloat64, kFloat32}) {
      const double tol = dt == kFloat64 ? 1e-10 : 3e-5;
      check_twins("layer_norm", ln_fused, ln_composed, {x, w, b}, dt, tol);
      check_twins("layer_norm, no affine", [](In in) { return layer_norm(in[0], {}, {}, 1e-5); },
                  [](In in) { return layer_norm_reference(in[0], {}, {}, 1e-5); }, {x}, dt, tol);
      check_twins("layer_norm, non-contiguous input",
                  [](In in) { return layer_norm(transpose(in[0], 0, 1), in[1], in[2], 1e-5); },
                  [](In in) { return layer_norm_reference(transpose(in[0], 0, 1), in[1], in[2], 1e-5); }, {x, w, b},
                  dt, tol);
      check_twins("add_layer_norm", add_ln_fused, add_ln_composed, {x, r, w, b}, dt, tol);
    }
  }
}

TEST_CASE("fused bias_gelu equals gelu(x + bias) in float32 and float64") {
  Generator g(4);
  Tensor x = randn({3, 10, 37}, g, kFloat64, 0.0, 2.0), b = randn({37}, g, kFloat64);
  for (DType dt : {kFloat64, kFloat32})
    for (const char* approx : {"none", "tanh"}) {
      CAPTURE(approx);
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      check_twins("bias_gelu", [approx](In in) { return bias_gelu(in[0], in[1], approx); },
                  [approx](In in) { return gelu(in[0] + in[1], approx); }, {x, b}, dt, tol);
      check_twins("bias_gelu, non-contiguous input",
                  [approx](In in) { return bias_gelu(transpose(in[0], 0, 1), in[1], approx); },
                  [approx](In in) { return gelu(transpose(in[0], 0, 1) + in[1], approx); }, {x, b}, dt, tol);
    }
}

TEST_CASE("fused weight and bias gradients are the same for 1, 2 and 3 threads") {
  const int before = num_threads();
  // 4096 rows of 32: 128 row blocks, split over several chunks when threads are available.
  Generator g(5);
  Tensor x = randn({4096, 32}, g), w = randn({32}, g), b = randn({32}, g), up = randn({4096, 32}, g);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor xl = x.detach().requires_grad_(), wl = w.detach().requires_grad_(), bl = b.detach().requires_grad_();
    Tensor y = bias_gelu(layer_norm(xl, wl, bl), bl);  // both ops' column sums reach bl
    y.backward(up);
    std::vector<float> v = wl.grad().to_vector<float>();
    for (float f : bl.grad().to_vector<float>()) v.push_back(f);
    runs.push_back(v);
  }
  set_num_threads(before);
  CHECK(runs[0] == runs[1]);  // bitwise
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("under ConservativeMode layer_norm is the composed form with 1/std constant") {
  Tensor x = nc_randn({3, 6}, 20), w = nc_randn({6}, 21), b = nc_randn({6}, 22);
  auto grad_of = [&](bool conservative, bool composed) {
    Tensor xl = x.detach().requires_grad_();
    std::optional<ConservativeModeGuard> guard;
    if (conservative) guard.emplace();
    Tensor y = composed ? layer_norm_reference(xl, w, b) : layer_norm(xl, w, b);
    sum(y * y).backward();
    return xl.grad();
  };
  Tensor lrp = grad_of(true, false);
  CHECK(allclose(lrp, grad_of(true, true), 1e-12, 1e-12));
  CHECK(!allclose(lrp, grad_of(false, false), 1e-3, 1e-3));  // the full gradient differs
  CHECK(allclose(grad_of(false, false), grad_of(false, true), 1e-10, 1e-10));
  // add_layer_norm and bias_gelu follow the same rule.
  {
    ConservativeModeGuard guard;
    Tensor xl = x.detach().requires_grad_();
    sum(square(add_layer_norm(xl, x, w, b).normed)).backward();
    Tensor xc = x.detach().requires_grad_();
    sum(square(layer_norm_reference(xc + x, w, b))).backward();
    CHECK(allclose(xl.grad(), xc.grad(), 1e-12, 1e-12));
  }
}

TEST_CASE("fused ops give typed errors naming the op and the shapes") {
  Generator g(7);
  Tensor x = randn({2, 3, 8}, g), w = ones({8}), bad = ones({5});
  auto msg = [](auto f) { return error_of(f); };
  CHECK_THROWS_AS(layer_norm(x, bad, {}), ShapeError);
  std::string m = msg([&] { layer_norm(x, bad, {}); });
  CHECK(m.find("layer_norm") != std::string::npos);
  CHECK(m.find("(2,3,8)") != std::string::npos);
  CHECK(m.find("(5)") != std::string::npos);
  CHECK_THROWS_AS(layer_norm(x, {}, ones({8}, kFloat64)), DTypeError);
  CHECK_THROWS_AS(layer_norm(x, w, {}, -1.0), ValueError);
  CHECK_THROWS_AS(layer_norm(scalar_tensor(1.0), {}, {}), ShapeError);
  CHECK_THROWS_AS(layer_norm(ones({2, 0}), {}, {}), ShapeError);
  CHECK_THROWS_AS(layer_norm(ones({2, 3}, kInt64), {}, {}), DTypeError);
  m = msg([&] { add_layer_norm(x, randn({4, 8}, g), w, {}); });
  CHECK(m.find("add_layer_norm") != std::string::npos);
  CHECK(m.find("(4,8)") != std::string::npos);
  CHECK_THROWS_AS(add_layer_norm(x, randn({4, 8}, g), w, {}), ShapeError);
  CHECK_THROWS_AS(add_layer_norm(randn({3, 8}, g), randn({2, 3, 8}, g), w, {}), ShapeError);  // would grow x
  CHECK_THROWS_AS(add_layer_norm(x, {}, w, {}), ValueError);
  m = msg([&] { bias_gelu(x, bad); });
  CHECK(m.find("bias_gelu") != std::string::npos);
  CHECK(m.find("(5)") != std::string::npos);
  CHECK_THROWS_AS(bias_gelu(x, bad), ShapeError);
  CHECK_THROWS_AS(bias_gelu(x, ones({8}), "fast"), ValueError);
  CHECK_THROWS_AS(bias_gelu(x, {}), ValueError);
  CHECK_THROWS_AS(bias_gelu(x, ones({8}, kFloat64)), DTypeError);
}

}  // namespace

// Float64 gradient checks (central differences, random upstream gradient) for every
// differentiable op in autograd/ops.hpp. Every leaf is non-contiguous (transposed or strided
// memory), binary ops run on shapes that broadcast in both directions, and unary ops and
// reductions are also checked on a zero-stride (expanded) input, so that the engine's single
// broadcast reduction is exercised everywhere. Inputs stay tiny (at most 2x3x4) because each
// check costs two forward passes per input element.
//
// Points where an op is not differentiable (relu/abs at 0, clamp at its bounds, softplus at its
// threshold, ties in max/maximum) are kept out of the inputs by construction; the behaviour at
// ties is checked by hand at the end.
#include <limits>

#include "grad_helpers.hpp"
#include "tensor/kernels.hpp"

namespace {

using namespace attnlab;
using namespace attnlab::testing;
using In = const std::vector<Tensor>&;
using Fn1 = std::function<Tensor(const Tensor&)>;
using Fn2 = std::function<Tensor(const Tensor&, const Tensor&)>;

// How a case's inputs are drawn.
enum class Draw { Normal, Positive, NonZero };

Tensor draw(Draw kind, Dims shape, uint64_t seed, std::vector<double> kinks = {}) {
  switch (kind) {
    case Draw::Positive: return nc_uniform(shape, seed, 0.5, 2.0);
    case Draw::NonZero: return nc_away(shape, seed, {0.0}, 0.3);
    case Draw::Normal: break;
  }
  return nc_away(shape, seed, kinks);
}

Tensor bool_mask(std::vector<bool> v, Dims shape) { return from_vector(v, shape); }

// A (3, 4) mask whose row 1 allows nothing: a fully masked softmax row along dim -1.
Tensor mask_3x4() {
  return bool_mask({true, false, true, true,  //
                    false, false, false, false,  //
                    true, true, false, true},
                   {3, 4});
}

// ============================ the checker itself ============================

TEST_CASE("gradcheck rejects a wrong backward formula") {
  // exp with the gradient of the identity: right at x = 0 only.
  auto bad_exp = [](In in) {
    return record("bad_exp", kernels::unary(kernels::Unary::Exp, in[0]), {in[0]},
                  [](const Tensor& g, const Tensor&, const Node&) { return Grads{g}; });
  };
  GradcheckResult r = gradcheck(bad_exp, {nc_randn({2, 3}, 1)});
  CHECK(!r.ok);
  CHECK(r.message.find("input 0") != std::string::npos);
  // A gradient that lands on the wrong element (a transposed gradient for a square input).
  auto bad_layout = [](In in) {
    return record("bad_layout", kernels::clone(in[0]), {in[0]},
                  [](const Tensor& g, const Tensor&, const Node&) { return Grads{transpose(g, 0, 1)}; });
  };
  CHECK(!gradcheck(bad_layout, {nc_randn({3, 3}, 2)}).ok);
  CHECK(gradcheck([](In in) { return exp(in[0]); }, {nc_randn({2, 3}, 1)}).ok);
}

// ============================ views and copies ============================

TEST_CASE("gradcheck: views and copies") {
  struct Case {
    const char* name;
    Dims shape;
    Fn1 f;
  };
  const std::vector<Case> cases = {
      {"reshape (copying)", {2, 3, 4}, [](const Tensor& x) { return reshape(x, {4, 6}); }},
      {"reshape -1", {2, 3, 4}, [](const Tensor& x) { return reshape(x, {3, -1}); }},
      {"reshape of expand", {3, 1}, [](const Tensor& x) { return reshape(expand(x, {2, 3, 4}), {6, 4}); }},
      {"view", {2, 3, 4}, [](const Tensor& x) { return view(x, {2, 3, 2, 2}); }},
      {"view adding a dim", {2, 3, 4}, [](const Tensor& x) { return view(x, {2, 1, 3, 4}); }},
      {"flatten all", {2, 3, 4}, [](const Tensor& x) { return flatten(x); }},
      {"flatten 1..2", {2, 3, 4}, [](const Tensor& x) { return flatten(x, 1, 2); }},
      {"flatten 0..1", {2, 3, 4}, [](const Tensor& x) { return flatten(x, 0, 1); }},
      {"permute", {2, 3, 4}, [](const Tensor& x) { return permute(x, {2, 0, 1}); }},
      {"permute negative", {2, 3, 4}, [](const Tensor& x) { return permute(x, {-1, -3, -2}); }},
      {"transpose", {2, 3, 4}, [](const Tensor& x) { return transpose(x, 0, 2); }},
      {"narrow", {2, 3, 4}, [](const Tensor& x) { return narrow(x, 1, 1, 2); }},
      {"narrow negative dim", {2, 3, 4}, [](const Tensor& x) { return narrow(x, -1, 0, 3); }},
      {"slice step 2", {2, 3, 4}, [](const Tensor& x) { return slice(x, 2, 0, 4, 2); }},
      {"slice step 3 from 1", {2, 3, 4}, [](const Tensor& x) { return slice(x, -1, 1, 4, 3); }},
      {"slice negative start", {2, 3, 4}, [](const Tensor& x) { return slice(x, 1, -2, 3); }},
      {"slice of permute", {2, 3, 4}, [](const Tensor& x) { return slice(permute(x, {2, 0, 1}), 0, 1, 4, 2); }},
      {"select", {2, 3, 4}, [](const Tensor& x) { return select(x, 1, -1); }},
      {"select dim 0", {2, 3, 4}, [](const Tensor& x) { return select(x, 0, 1); }},
      {"expand", {3, 1}, [](const Tensor& x) { return expand(x, {2, 3, 4}); }},
      {"expand -1", {3, 1}, [](const Tensor& x) { return expand(x, {2, -1, 4}); }},
      {"broadcast_to", {1, 4}, [](const Tensor& x) { return broadcast_to(x, {2, 3, 4}); }},
      {"squeeze all", {2, 1, 3}, [](const Tensor& x) { return squeeze(x); }},
      {"squeeze dim", {2, 1, 3}, [](const Tensor& x) { return squeeze(x, 1); }},
      {"squeeze dim (no-op)", {2, 1, 3}, [](const Tensor& x) { return squeeze(x, 0) * 1.0; }},
      {"unsqueeze 0", {2, 3, 4}, [](const Tensor& x) { return unsqueeze(x, 0); }},
      {"unsqueeze -1", {2, 3, 4}, [](const Tensor& x) { return unsqueeze(x, -1); }},
      {"contiguous", {2, 3, 4}, [](const Tensor& x) { return contiguous(x); }},
      {"contiguous of expand", {3, 1}, [](const Tensor& x) { return contiguous(expand(x, {2, 3, 4})); }},
      {"clone", {2, 3, 4}, [](const Tensor& x) { return clone(x); }},
      {"clone of expand", {1, 4}, [](const Tensor& x) { return clone(expand(x, {3, 4})); }},
      {"to (same dtype)", {2, 3, 4}, [](const Tensor& x) { return to(x, kFloat64) * 2.0; }},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    Tensor x = nc_randn(c.shape, ++seed);
    check_grad(c.name, [&](In in) { return c.f(in[0]); }, {x});
  }
  // A contiguous leaf takes reshape's no-copy path.
  check_grad("reshape (view)", [](In in) { return reshape(in[0], {6, 4}); }, {leaf64({2, 3, 4}, 7)});
}

// to() between float32 and float64 cannot be checked in float64 alone: its gradient is the
// upstream gradient converted back to the input's dtype.
TEST_CASE("gradient of to() converts back to the input dtype") {
  Tensor x = t32({1.5f, -2.0f, 0.25f}, {3});
  x.requires_grad_();
  Tensor w = t64({3.0, -1.0, 0.5}, {3});
  Tensor y = to(x, kFloat64);
  CHECK(y.dtype() == kFloat64);
  REQUIRE(y.requires_grad());
  sum(y * w).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(allclose(x.grad(), t32({3.0f, -1.0f, 0.5f}, {3})));

  // And the other way, through a float32 computation of a float64 leaf.
  Tensor z = leaf64({2, 2}, 3);
  Tensor z32 = to(transpose(z, 0, 1), kFloat32);
  sum(z32 * z32).backward();
  CHECK(z.grad().dtype() == kFloat64);
  CHECK(allclose(z.grad(), z.detach() * 2.0, 1e-6, 1e-6));
}

// ============================ elementwise ============================

TEST_CASE("gradcheck: unary elementwise ops, strided and expanded inputs") {
  struct Case {
    const char* name;
    Draw draw;
    std::vector<double> kinks;  // points to keep inputs away from
    Fn1 f;
  };
  const Tensor cond = bool_mask({true, false, false, true, true, true, false, false, true, false, true, false}, {3, 4});
  const std::vector<Case> cases = {
      {"neg", Draw::Normal, {}, [](const Tensor& x) { return neg(x); }},
      {"exp", Draw::Normal, {}, [](const Tensor& x) { return exp(x); }},
      {"log", Draw::Positive, {}, [](const Tensor& x) { return log(x); }},
      {"sqrt", Draw::Positive, {}, [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", Draw::Positive, {}, [](const Tensor& x) { return rsqrt(x); }},
      {"abs", Draw::Normal, {0.0}, [](const Tensor& x) { return abs(x); }},
      {"square", Draw::Normal, {}, [](const Tensor& x) { return square(x); }},
      {"reciprocal", Draw::NonZero, {}, [](const Tensor& x) { return reciprocal(x); }},
      {"sin", Draw::Normal, {}, [](const Tensor& x) { return sin(x); }},
      {"cos", Draw::Normal, {}, [](const Tensor& x) { return cos(x); }},
      {"tanh", Draw::Normal, {}, [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", Draw::Normal, {}, [](const Tensor& x) { return sigmoid(x); }},
      {"relu", Draw::Normal, {0.0}, [](const Tensor& x) { return relu(x); }},
      {"gelu (erf)", Draw::Normal, {}, [](const Tensor& x) { return gelu(x); }},
      {"gelu (tanh)", Draw::Normal, {}, [](const Tensor& x) { return gelu(x, "tanh"); }},
      {"elu", Draw::Normal, {0.0}, [](const Tensor& x) { return elu(x); }},
      {"elu alpha 0.7", Draw::Normal, {0.0}, [](const Tensor& x) { return elu(x, 0.7); }},
      {"softplus", Draw::Normal, {}, [](const Tensor& x) { return softplus(x); }},
      // beta * x crosses the threshold (x = 0.5): both the log1p and the linear regime.
      {"softplus beta 2 threshold 1", Draw::Normal, {0.5}, [](const Tensor& x) { return softplus(x, 2.0, 1.0); }},
      {"clamp", Draw::Normal, {-0.5, 0.7}, [](const Tensor& x) { return clamp(x, -0.5, 0.7); }},
      {"clamp_min", Draw::Normal, {0.2}, [](const Tensor& x) { return clamp_min(x, 0.2); }},
      {"clamp_max", Draw::Normal, {-0.1}, [](const Tensor& x) { return clamp_max(x, -0.1); }},
      {"pow(x, 3)", Draw::Normal, {}, [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow(x, 2.5)", Draw::Positive, {}, [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow(x, -1.5)", Draw::Positive, {}, [](const Tensor& x) { return pow(x, -1.5); }},
      {"pow(x, 0) + x", Draw::Normal, {}, [](const Tensor& x) { return pow(x, 0.0) + x; }},
      {"pow(2, x)", Draw::Normal, {}, [](const Tensor& x) { return pow(2.0, x); }},
      {"pow(0.5, x)", Draw::Normal, {}, [](const Tensor& x) { return pow(0.5, x); }},
      {"add scalar", Draw::Normal, {}, [](const Tensor& x) { return add(x, 2.5); }},
      {"mul scalar", Draw::Normal, {}, [](const Tensor& x) { return mul(x, -1.5); }},
      {"x + 2", Draw::Normal, {}, [](const Tensor& x) { return x + 2.0; }},
      {"2 + x", Draw::Normal, {}, [](const Tensor& x) { return 2.0 + x; }},
      {"x - 2", Draw::Normal, {}, [](const Tensor& x) { return x - 2.0; }},
      {"2 - x", Draw::Normal, {}, [](const Tensor& x) { return 2.0 - x; }},
      {"x * 3", Draw::Normal, {}, [](const Tensor& x) { return x * 3.0; }},
      {"3 * x", Draw::Normal, {}, [](const Tensor& x) { return 3.0 * x; }},
      {"x / 4", Draw::Normal, {}, [](const Tensor& x) { return x / 4.0; }},
      {"4 / x", Draw::NonZero, {}, [](const Tensor& x) { return 4.0 / x; }},
      {"-x", Draw::Normal, {}, [](const Tensor& x) { return -x; }},
      {"x * x (same input twice)", Draw::Normal, {}, [](const Tensor& x) { return x * x; }},
      {"where(cond, x, 1.5)", Draw::Normal, {}, [cond](const Tensor& x) { return where(cond, x, 1.5); }},
      {"where(cond, 1 - x, x)", Draw::Normal, {}, [cond](const Tensor& x) { return where(cond, 1.0 - x, x * 2.0); }},
      {"masked_fill", Draw::Normal, {}, [cond](const Tensor& x) { return masked_fill(x, cond, 2.0); }},
      {"masked_fill (broadcast mask)", Draw::Normal, {},
       [cond](const Tensor& x) { return masked_fill(x, select(cond, 0, 0), -1.0); }},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    // Strided (2, 3, 4) input.
    Tensor x = draw(c.draw, {2, 3, 4}, ++seed, c.kinks);
    check_grad(c.name, [&](In in) { return c.f(in[0]); }, {x});
    // A (3, 1) leaf seen through a zero-stride expand to (2, 3, 4).
    Tensor xb = draw(c.draw, {3, 1}, ++seed, c.kinks);
    check_grad(std::string(c.name) + " on expanded input", [&](In in) { return c.f(expand(in[0], {2, 3, 4})); }, {xb});
  }
}

TEST_CASE("gradcheck: binary elementwise ops with broadcasting") {
  struct Case {
    const char* name;
    Draw da, db;
    Fn2 f;
  };
  const Tensor cond = bool_mask({true, false, false, true, true, true, false, false, true, false, true, false}, {3, 4});
  const std::vector<Case> cases = {
      {"add", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", Draw::Normal, Draw::NonZero, [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow(tensor, tensor)", Draw::Positive, Draw::Normal, [](const Tensor& a, const Tensor& b) { return pow(a, b); }},
      // Independent normal draws: no two compared elements come within 1e-6 of each other.
      {"maximum", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"a + b", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"a - b", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"a * b", Draw::Normal, Draw::Normal, [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"a / b", Draw::Normal, Draw::NonZero, [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"where", Draw::Normal, Draw::Normal, [cond](const Tensor& a, const Tensor& b) { return where(cond, a, b); }},
      {"a * b + a / b - b", Draw::Normal, Draw::NonZero,
       [](const Tensor& a, const Tensor& b) { return a * b + a / b - b; }},
  };
  // (a, b) shapes: b broadcast into a, both broadcast, a broadcast into b, equal shapes.
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{2, 3, 4}, {3, 1}}, {{3, 1}, {2, 1, 4}}, {{4}, {2, 3, 4}}, {{3, 4}, {3, 4}}};
  uint64_t seed = 300;
  for (const Case& c : cases)
    for (const auto& [sa, sb] : shapes) {
      Tensor a = draw(c.da, sa, ++seed), b = draw(c.db, sb, ++seed);
      std::string what = fmt::format("{} {} with {}", c.name, to_string(sa), to_string(sb));
      check_grad(what, [&](In in) { return c.f(in[0], in[1]); }, {a, b});
      // Only one operand requiring grad: the other gets nothing and the first is still right.
      Tensor b_const = b.detach();
      check_grad(what + ", b constant", [&](In in) { return c.f(in[0], in[1]); }, {a, b_const});
    }
}

// ============================ reductions ============================

TEST_CASE("gradcheck: reductions") {
  struct Case {
    const char* name;
    Fn1 f;
  };
  const std::vector<Case> cases = {
      {"sum all", [](const Tensor& x) { return sum(x); }},
      {"sum dim 1", [](const Tensor& x) { return sum(x, {1}); }},
      {"sum dims 0,2 keepdim", [](const Tensor& x) { return sum(x, {0, 2}, true); }},
      {"sum dim -1", [](const Tensor& x) { return sum(x, {-1}); }},
      {"sum {} keepdim", [](const Tensor& x) { return sum(x, {}, true); }},
      {"mean all", [](const Tensor& x) { return mean(x); }},
      {"mean dim 1", [](const Tensor& x) { return mean(x, {1}); }},
      {"mean dims 0,2 keepdim", [](const Tensor& x) { return mean(x, {0, 2}, true); }},
      {"var dim 1", [](const Tensor& x) { return var(x, {1}); }},
      {"var dims 0,2 correction 0 keepdim", [](const Tensor& x) { return var(x, {0, 2}, 0, true); }},
      {"var all", [](const Tensor& x) { return var(x, {}); }},
      {"max dim 1", [](const Tensor& x) { return max(x, 1).values; }},
      {"max dim -1 keepdim", [](const Tensor& x) { return max(x, -1, true).values; }},
      {"max all", [](const Tensor& x) { return max(x); }},
      {"min dim 0", [](const Tensor& x) { return min(x, 0).values; }},
      {"min dim 2 keepdim", [](const Tensor& x) { return min(x, 2, true).values; }},
      {"min all", [](const Tensor& x) { return min(x); }},
      {"amax dim 1", [](const Tensor& x) { return amax(x, {1}); }},
      {"amax dims 0,2 keepdim", [](const Tensor& x) { return amax(x, {0, 2}, true); }},
      {"amax all", [](const Tensor& x) { return amax(x, {}); }},
      {"logsumexp dim 1", [](const Tensor& x) { return logsumexp(x, {1}); }},
      {"logsumexp dims 0,2 keepdim", [](const Tensor& x) { return logsumexp(x, {0, 2}, true); }},
      {"logsumexp all", [](const Tensor& x) { return logsumexp(x, {}); }},
      {"cumsum dim 0", [](const Tensor& x) { return cumsum(x, 0); }},
      {"cumsum dim 1", [](const Tensor& x) { return cumsum(x, 1); }},
      {"cumsum dim -1", [](const Tensor& x) { return cumsum(x, -1); }},
  };
  uint64_t seed = 400;
  for (const Case& c : cases) {
    check_grad(c.name, [&](In in) { return c.f(in[0]); }, {nc_randn({2, 3, 4}, ++seed)});
    // Through a zero-stride input. Max/min over copies of one element still have a derivative:
    // the copies move together.
    check_grad(std::string(c.name) + " on expanded input", [&](In in) { return c.f(expand(in[0], {2, 3, 4})); },
               {nc_randn({1, 3, 4}, ++seed)});
  }
}

TEST_CASE("gradcheck: softmax and log_softmax, with and without masks") {
  const Tensor mask = mask_3x4();                      // row 1 fully masked along dim -1
  const Tensor mask_b = bool_mask({true, false, true, true}, {4});  // broadcast over rows
  struct Case {
    const char* name;
    Fn1 f;
  };
  // Masked log_softmax gives -inf at masked entries; the masked_fill keeps the checked
  // objective finite (their gradient is checked by hand in the next test case).
  const Tensor not_mask = logical_not(mask), not_mask_b = logical_not(mask_b);
  const std::vector<Case> cases = {
      {"softmax dim -1", [](const Tensor& x) { return softmax(x, -1); }},
      {"softmax dim 1", [](const Tensor& x) { return softmax(x, 1); }},
      {"softmax dim 0", [](const Tensor& x) { return softmax(x, 0); }},
      {"log_softmax dim -1", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"log_softmax dim 1", [](const Tensor& x) { return log_softmax(x, 1); }},
      {"log_softmax dim 0", [](const Tensor& x) { return log_softmax(x, 0); }},
      {"softmax masked dim -1", [mask](const Tensor& x) { return softmax(x, -1, mask); }},
      {"softmax masked dim 1", [mask](const Tensor& x) { return softmax(x, 1, mask); }},
      {"softmax broadcast mask", [mask_b](const Tensor& x) { return softmax(x, -1, mask_b); }},
      {"log_softmax masked dim -1",
       [mask, not_mask](const Tensor& x) { return masked_fill(log_softmax(x, -1, mask), not_mask, 0.0); }},
      {"log_softmax masked dim 1",
       [mask, not_mask](const Tensor& x) { return masked_fill(log_softmax(x, 1, mask), not_mask, 0.0); }},
      {"log_softmax broadcast mask",
       [mask_b, not_mask_b](const Tensor& x) { return masked_fill(log_softmax(x, -1, mask_b), not_mask_b, 0.0); }},
  };
  uint64_t seed = 500;
  for (const Case& c : cases) {
    check_grad(c.name, [&](In in) { return c.f(in[0]); }, {nc_randn({2, 3, 4}, ++seed)});
    check_grad(std::string(c.name) + " on expanded input", [&](In in) { return c.f(expand(in[0], {2, 3, 4})); },
               {nc_randn({3, 1}, ++seed)});
  }
}

TEST_CASE("masked softmax: a fully masked row has finite, zero gradient") {
  const Tensor mask = mask_3x4();
  for (bool log_form : {false, true}) {
    CAPTURE(log_form);
    Tensor x = nc_randn({2, 3, 4}, 550);
    Tensor y = log_form ? log_softmax(x, -1, mask) : softmax(x, -1, mask);
    // Forward: masked entries are 0 (softmax) or -inf (log_softmax), never NaN.
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          double v = y.at({b, i, j});
          CHECK(!std::isnan(v));
          if (!mask.at({i, j})) CHECK(v == (log_form ? -std::numeric_limits<double>::infinity() : 0.0));
        }
    // An upstream gradient that is nonzero everywhere, masked entries included: their outputs
    // do not depend on x, so nothing may flow back to them.
    Generator g(551);
    Tensor up = randn({2, 3, 4}, g, kFloat64);
    y.backward(up);
    Tensor gx = x.grad();
    REQUIRE(gx.defined());
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          double v = gx.at({b, i, j});
          CHECK(std::isfinite(v));
          if (!mask.at({i, j})) CHECK(v == 0.0);
        }
    // The unmasked rows still get a nonzero gradient.
    CHECK(std::abs(gx.at({0, 0, 0})) > 0);
  }
}

// ============================ matrix products ============================

TEST_CASE("gradcheck: matmul") {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{4}, {4}},                    // dot product -> scalar
      {{3}, {3, 4}},                 // vector @ matrix
      {{2, 3}, {3}},                 // matrix @ vector
      {{2, 3}, {3, 4}},              // 2-d
      {{2, 2, 3}, {2, 3, 4}},        // batched
      {{2, 1, 2, 3}, {3, 3, 4}},     // batch of a broadcast against b's
      {{3, 2, 3}, {2, 1, 3, 4}},     // batch of b broadcast against a's
      {{2, 3}, {2, 3, 4}},           // 2-d a against batched b
      {{2, 3, 4}, {4, 5}},           // 3-d x @ 2-d w: folded weight gradient
      {{2, 2, 2, 3}, {3, 2}},        // 4-d x @ 2-d w: folded weight gradient
      {{3}, {2, 3, 4}},              // vector @ batch
      {{2, 3, 4}, {4}},              // batch @ vector
  };
  uint64_t seed = 600;
  for (const auto& [sa, sb] : shapes) {
    Tensor a = nc_randn(sa, ++seed), b = nc_randn(sb, ++seed);
    std::string what = fmt::format("matmul {} @ {}", to_string(sa), to_string(sb));
    check_grad(what, [](In in) { return matmul(in[0], in[1]); }, {a, b});
    check_grad(what + ", only b requires grad", [](In in) { return matmul(in[0], in[1]); }, {a.detach(), b});
    check_grad(what + ", only a requires grad", [](In in) { return matmul(in[0], in[1]); }, {a, b.detach()});
  }
  // The folded weight gradient on a zero-stride batch.
  check_grad("matmul expand(x) @ w", [](In in) { return matmul(expand(in[0], {2, 3, 4}), in[1]); },
             {nc_randn({1, 3, 4}, 650), nc_randn({4, 5}, 651)});
  // Both operands broadcast from (.., 1, ..) leaves.
  check_grad("matmul expand(a) @ expand(b)",
             [](In in) { return matmul(expand(in[0], {2, 2, 3}), expand(in[1], {2, 3, 4})); },
             {nc_randn({2, 1, 3}, 652), nc_randn({1, 3, 4}, 653)});
}

TEST_CASE("matmul x @ transpose(w): w's gradient comes back contiguous, equal to the naive g^T x") {
  // A Linear's product (and a tied LM head's): the weight gradient is computed in the weight's own
  // (out, in) layout, so .grad adopts it without a transposed copy. The naive twin: the folded
  // (in, out) product x^T g, transposed.
  for (const Dims& xs : {Dims{5, 4}, Dims{2, 3, 4}, Dims{2, 2, 3, 4}}) {
    Generator gen(70);
    Tensor x = randn(xs, gen, kFloat64).requires_grad_();
    Tensor w = randn({6, 4}, gen, kFloat64).requires_grad_();  // (out, in), contiguous
    Tensor y = matmul(x, transpose(w, 0, 1));                   // (..., 6)
    Tensor g = randn(y.shape(), gen, kFloat64);
    y.backward(g);
    const int64_t rows = x.numel() / 4;
    Tensor want = kernels::matmul(transpose(reshape(g, {rows, 6}), 0, 1), reshape(x.detach(), {rows, 4}));  // (6, 4)
    CAPTURE(to_string(xs));
    REQUIRE(w.grad().shape() == Dims{6, 4});
    CHECK(w.grad().is_contiguous());
    CHECK(allclose(w.grad(), want, 1e-12, 1e-12));
    // A second backward adds to it in place, in the same layout.
    Tensor before = w.grad();
    matmul(x, transpose(w, 0, 1)).backward(g);
    CHECK(w.grad().storage() == before.storage());
    CHECK(allclose(w.grad(), mul(want, 2.0), 1e-12, 1e-12));
  }
}

// ============================ structure and indexing ============================

TEST_CASE("gradcheck: cat, stack, split, chunk") {
  Tensor a = nc_randn({2, 3, 4}, 701), b = nc_randn({1, 3, 4}, 702), c = nc_randn({2, 2, 4}, 703);
  check_grad("cat dim 0", [](In in) { return cat({in[0], in[1]}, 0); }, {a, b});
  check_grad("cat dim 1", [](In in) { return cat({in[0], in[1]}, 1); }, {a, c});
  check_grad("cat dim -1 with a constant",
             [](In in) { return cat({in[0], in[1], in[0]}, -1); }, {a, nc_randn({2, 3, 2}, 704).detach()});
  check_grad("cat of expanded", [](In in) { return cat({expand(in[0], {2, 3, 4}), in[1]}, 0); },
             {nc_randn({3, 1}, 705), b});

  Tensor p = nc_randn({3, 4}, 711), q = nc_randn({3, 4}, 712), r = nc_randn({3, 4}, 713);
  check_grad("stack dim 0", [](In in) { return stack({in[0], in[1], in[2]}, 0); }, {p, q, r});
  check_grad("stack dim -1", [](In in) { return stack({in[0], in[1]}, -1); }, {p, q});
  check_grad("stack dim 1 of expanded", [](In in) { return stack({expand(in[0], {3, 4}), in[1]}, 1); },
             {nc_randn({1, 4}, 714), q});

  // Each part of a split is scaled differently and reordered, so a gradient sent to the wrong
  // part (or with the wrong offset) shows up.
  Tensor x = nc_randn({2, 3, 5}, 721);
  check_grad("split by size", [](In in) {
    auto parts = split(in[0], 2, 2);  // sizes 2, 2, 1
    REQUIRE(parts.size() == 3);
    return cat({parts[2] * 3.0, parts[0], parts[1] * -2.0}, 2);
  }, {x});
  check_grad("split by sizes", [](In in) {
    auto parts = split(in[0], std::vector<int64_t>{1, 2}, 1);
    REQUIRE(parts.size() == 2);
    return cat({parts[1], parts[0] * 0.5}, 1);
  }, {x});
  check_grad("chunk", [](In in) {
    auto parts = chunk(in[0], 3, -1);  // sizes 2, 2, 1
    REQUIRE(parts.size() == 3);
    return sum(parts[0]) * 2.0 + sum(square(parts[1])) - sum(parts[2] * parts[2] * parts[2]);
  }, {x});
  check_grad("chunk of expanded", [](In in) {
    auto parts = chunk(expand(in[0], {2, 3, 4}), 2, 0);
    return parts[0] * 2.0 - parts[1];
  }, {nc_randn({3, 1}, 722)});
}

TEST_CASE("gradcheck: gather, scatter_add, index_select, embedding") {
  // Repeated indices make the backward accumulate.
  Tensor idx1 = from_vector<int64_t>({0, 2, 2, 1, 1, 1, 0, 0, 2, 0, 1, 2, 2, 2, 0, 1}, {2, 2, 4});
  Tensor x = nc_randn({2, 3, 4}, 801);
  check_grad("gather dim 1", [&](In in) { return gather(in[0], 1, idx1); }, {x});
  Tensor idx2 = from_vector<int64_t>({3, 0, 3, 1, 2, 2, 0, 1, 3, 3, 3, 0, 1, 0, 2, 2, 1, 0}, {2, 3, 3});
  check_grad("gather dim -1", [&](In in) { return gather(in[0], -1, idx2); }, {x});
  check_grad("gather of expanded", [&](In in) { return gather(expand(in[0], {2, 3, 4}), 1, idx1); },
             {nc_randn({3, 1}, 802)});

  Tensor self = nc_randn({2, 3, 4}, 811), src = nc_randn({2, 2, 4}, 812);
  check_grad("scatter_add", [&](In in) { return scatter_add(in[0], 1, idx1, in[1]); }, {self, src});
  check_grad("scatter_add, only src", [&](In in) { return scatter_add(in[0], 1, idx1, in[1]); }, {self.detach(), src});
  check_grad("scatter_add into expanded", [&](In in) { return scatter_add(expand(in[0], {2, 3, 4}), 1, idx1, in[1]); },
             {nc_randn({1, 4}, 813), src});

  Tensor sel = from_vector<int64_t>({2, 0, 2}, {3});
  check_grad("index_select dim 1", [&](In in) { return index_select(in[0], 1, sel); }, {x});
  check_grad("index_select dim 0", [](In in) { return index_select(in[0], 0, from_vector<int64_t>({1, 1, 0}, {3})); },
             {x});
  check_grad("index_select dim -1", [&](In in) { return index_select(in[0], -1, sel); }, {x});

  Tensor weight = nc_randn({5, 3}, 821);
  Tensor ids = from_vector<int64_t>({4, 0, 4, 2, 2, 2}, {2, 3});
  check_grad("embedding 2-d indices", [&](In in) { return embedding(in[0], ids); }, {weight});
  check_grad("embedding 1-d indices", [](In in) { return embedding(in[0], from_vector<int64_t>({1, 3, 1}, {3})); },
             {weight});
}

TEST_CASE("gradcheck: topk, sort, tril, triu") {
  struct Case {
    const char* name;
    Fn1 f;
  };
  const std::vector<Case> cases = {
      {"topk largest dim -1", [](const Tensor& x) { return topk(x, 2, -1).values; }},
      {"topk smallest dim 1", [](const Tensor& x) { return topk(x, 2, 1, false).values; }},
      {"topk unsorted dim 0", [](const Tensor& x) { return topk(x, 1, 0, true, false).values; }},
      {"sort dim -1", [](const Tensor& x) { return sort(x, -1).values; }},
      {"sort descending dim 0", [](const Tensor& x) { return sort(x, 0, true).values; }},
      {"sort dim 1", [](const Tensor& x) { return sort(x, 1).values; }},
      {"tril", [](const Tensor& x) { return tril(x); }},
      {"tril +1", [](const Tensor& x) { return tril(x, 1); }},
      {"triu", [](const Tensor& x) { return triu(x); }},
      {"triu -1", [](const Tensor& x) { return triu(x, -1); }},
  };
  uint64_t seed = 900;
  for (const Case& c : cases) check_grad(c.name, [&](In in) { return c.f(in[0]); }, {nc_randn({2, 3, 4}, ++seed)});
  check_grad("tril of expanded", [](In in) { return tril(expand(in[0], {2, 3, 4})); }, {nc_randn({3, 1}, 950)});
  check_grad("sort of expanded", [](In in) { return sort(expand(in[0], {2, 3, 4}), 1).values; },
             {nc_randn({3, 1}, 951)});
}

// ============================ non-differentiable points, by hand ============================

TEST_CASE("maximum and minimum split the gradient evenly at ties") {
  Tensor a = t64({1.0, 2.0, 3.0}, {3}), b = t64({1.0, 0.0, 5.0}, {3});
  a.requires_grad_();
  b.requires_grad_();
  sum(maximum(a, b) * t64({2.0, 4.0, 8.0}, {3})).backward();
  CHECK(allclose(a.grad(), t64({1.0, 4.0, 0.0}, {3})));
  CHECK(allclose(b.grad(), t64({1.0, 0.0, 8.0}, {3})));

  a.set_grad(Tensor());
  b.set_grad(Tensor());
  sum(minimum(a, b) * t64({2.0, 4.0, 8.0}, {3})).backward();
  CHECK(allclose(a.grad(), t64({1.0, 0.0, 8.0}, {3})));
  CHECK(allclose(b.grad(), t64({1.0, 4.0, 0.0}, {3})));

  // A tie against a broadcast operand: each tied element sends half to a, half to the scalar.
  Tensor c = t64({2.0, 2.0, 1.0}, {3}), s = t64({2.0}, {1});
  c.requires_grad_();
  s.requires_grad_();
  sum(maximum(c, s)).backward();
  CHECK(allclose(c.grad(), t64({0.5, 0.5, 0.0}, {3})));
  CHECK(allclose(s.grad(), t64({2.0}, {1})));
}

TEST_CASE("pow(a, b) has zero gradient in b where a == 0") {
  Tensor a = t64({0.0, 2.0}, {2}), b = t64({2.0, 3.0}, {2});
  a.requires_grad_();
  b.requires_grad_();
  sum(pow(a, b)).backward();
  CHECK(allclose(b.grad(), t64({0.0, 8.0 * std::log(2.0)}, {2})));
  CHECK(allclose(a.grad(), t64({0.0, 12.0}, {2})));
}

TEST_CASE("max along a dim sends the gradient to the returned index") {
  Tensor x = t64({1.0, 5.0, 5.0, -1.0, 7.0, 2.0}, {2, 3});
  x.requires_grad_();
  auto [values, indices] = max(x, 1);
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  sum(values * t64({3.0, 4.0}, {2})).backward();
  CHECK(allclose(x.grad(), t64({0.0, 3.0, 0.0, 0.0, 4.0, 0.0}, {2, 3})));
}

}  // namespace

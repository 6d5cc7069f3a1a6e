// Elementwise ops: every binary op under NumPy broadcasting (including non-contiguous, 0-d and
// size-0 operands) against a naive broadcast loop; int64 arithmetic; dtype-mismatch messages;
// unary functions against the C library in float64 and float32; the fast float exp used by the
// kernels over its whole useful range; in-place updates.
#include <limits>

#include "tensor/kernels/map.hpp"   // store_run, the streaming-store path
#include "tensor/kernels/rows.hpp"  // exp_fast, the polynomial exp the float kernels use
#include "tensor_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
};

std::vector<BinaryCase> arithmetic_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double x, double y) { return x + y; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double x, double y) { return x - y; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double x, double y) { return x * y; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double x, double y) { return x / y; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double x, double y) { return std::pow(x, y); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double x, double y) { return std::min(x, y); }},
  };
}

std::vector<BinaryCase> comparison_cases() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double x, double y) { return double(x == y); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double x, double y) { return double(x != y); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double x, double y) { return double(x < y); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double x, double y) { return double(x <= y); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double x, double y) { return double(x > y); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double x, double y) { return double(x >= y); }},
  };
}

// Values in [0.5, 2.5] rounded to quarters: exact in float32, positive (pow-safe), and with
// frequent ties so comparisons and maximum/minimum see equal operands.
Tensor operand(const Dims& shape, uint64_t seed, DType dtype) {
  Generator g(seed);
  std::vector<double> v = rand(shape, g, kFloat64, 0.5, 2.5).to_vector<double>();
  for (double& e : v) e = std::round(e * 4) / 4;
  return to(from_vector(v, shape), dtype);
}

// Pairs of shapes (and a way to make each operand, possibly non-contiguous) that cover the
// broadcasting rules.
struct ShapePair {
  const char* what;
  std::function<Tensor(uint64_t, DType)> a, b;
  Dims out;
};

std::vector<ShapePair> shape_pairs() {
  auto plain = [](Dims s) { return [s](uint64_t seed, DType dt) { return operand(s, seed, dt); }; };
  return {
      {"same shape", plain({2, 3, 4}), plain({2, 3, 4}), {2, 3, 4}},
      {"trailing vector", plain({2, 3, 4}), plain({4}), {2, 3, 4}},
      {"both broadcast", plain({2, 1, 4}), plain({3, 1}), {2, 3, 4}},
      {"0-d left", plain({}), plain({2, 3}), {2, 3}},
      {"0-d right", plain({3, 2}), plain({}), {3, 2}},
      {"0-d both", plain({}), plain({}), {}},
      {"size-0 dim", plain({2, 0, 3}), plain({3}), {2, 0, 3}},
      {"size-0 against 1", plain({0, 1}), plain({1, 5}), {0, 5}},
      {"transposed left",
       [](uint64_t seed, DType dt) { return transpose(operand({4, 3}, seed, dt), 0, 1); }, plain({2, 1, 4}), {2, 3, 4}},
      {"strided slices",
       [](uint64_t seed, DType dt) { return slice(operand({3, 8}, seed, dt), 1, 0, 8, 2); },
       [](uint64_t seed, DType dt) { return narrow(operand({3, 6}, seed, dt), 1, 1, 4); }, {3, 4}},
      {"expanded right", plain({3, 5}), [](uint64_t seed, DType dt) { return expand(operand({3, 1}, seed, dt), {3, 5}); },
       {3, 5}},
      {"permuted both",
       [](uint64_t seed, DType dt) { return permute(operand({4, 2, 3}, seed, dt), {1, 2, 0}); },
       [](uint64_t seed, DType dt) { return permute(operand({4, 3}, seed, dt), {1, 0}); }, {2, 3, 4}},
  };
}

}  // namespace

TEST_CASE("binary arithmetic: every op under every broadcasting pattern, float64 and float32") {
  for (DType dt : {kFloat64, kFloat32}) {
    for (const auto& c : arithmetic_cases()) {
      uint64_t seed = 1;
      for (const auto& sp : shape_pairs()) {
        Tensor a = sp.a(seed++, dt), b = sp.b(seed++, dt);
        INFO(c.name, " on ", sp.what, " in ", dtype_name(dt));
        Tensor got = c.op(a, b);
        REQUIRE(got.shape() == sp.out);
        CHECK(got.dtype() == dt);
        CHECK(got.is_contiguous());
        auto want = naive_binary(a, b, sp.out, c.ref);
        if (dt == kFloat64)
          CHECK(vec_close(got.to_vector<double>(), want, 1e-15, 0));
        else
          CHECK(vec_close(got.to_vector<double>(), want, 2e-7, 0));
        // The op is symmetric in how it treats operand order for shapes.
        CHECK(c.op(b, a).shape() == sp.out);
      }
    }
  }
}

TEST_CASE("comparisons and logical ops broadcast and give bool") {
  for (DType dt : {kFloat64, kFloat32, kInt64}) {
    for (const auto& c : comparison_cases()) {
      uint64_t seed = 100;
      for (const auto& sp : shape_pairs()) {
        Tensor a = sp.a(seed++, dt == kInt64 ? kFloat64 : dt), b = sp.b(seed++, dt == kInt64 ? kFloat64 : dt);
        if (dt == kInt64) {  // quarters * 4 are integers
          a = to(mul(a, 4.0), kInt64);
          b = to(mul(b, 4.0), kInt64);
        }
        INFO(c.name, " on ", sp.what, " in ", dtype_name(dt));
        Tensor got = c.op(a, b);
        REQUIRE(got.shape() == sp.out);
        CHECK(got.dtype() == kBool);
        CHECK(got.to_vector<double>() == naive_binary(a, b, sp.out, c.ref));
      }
    }
  }
  // The operands were built so that ties happen: eq must be true somewhere.
  Tensor a = operand({50}, 1, kFloat64), b = operand({50}, 2, kFloat64);
  CHECK(sum(eq(a, b)).item() > 0);

  // Comparisons against a double.
  Tensor x = from_vector<float>({-1, 0, 2.5f}, {3});
  CHECK(gt(x, 0.0).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(le(x, 0.0).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK(eq(x, 2.5).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(ne(x, 2.5).to_vector<bool>() == std::vector<bool>{true, true, false});
  CHECK(lt(x, -1.0).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK(ge(x, -1.0).to_vector<bool>() == std::vector<bool>{true, true, true});
  // An int64 tensor against a fractional scalar compares exactly (2 < 2.5), not against a
  // truncated scalar.
  Tensor r = arange(4);
  CHECK(lt(r, 2.5).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(le(r, 1.5).to_vector<bool>() == std::vector<bool>{true, true, false, false});
  CHECK(gt(r, 1.5).to_vector<bool>() == std::vector<bool>{false, false, true, true});
  CHECK(ge(r, -0.5).to_vector<bool>() == std::vector<bool>{true, true, true, true});
  CHECK(eq(r, 2.5).to_vector<bool>() == std::vector<bool>{false, false, false, false});
  CHECK(ne(r, 2.5).to_vector<bool>() == std::vector<bool>{true, true, true, true});
  CHECK(eq(r, 2.0).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK(lt(r, -2.5).to_vector<bool>() == std::vector<bool>{false, false, false, false});
  // NaN compares unequal to everything, itself included.
  Tensor n = from_vector<double>({kNaN}, {1});
  CHECK_FALSE(eq(n, n).to_vector<bool>()[0]);
  CHECK(ne(n, n).to_vector<bool>()[0]);

  Tensor p = from_vector<bool>({true, false}, {2, 1});
  Tensor q = from_vector<bool>({true, false, true}, {1, 3});
  CHECK(logical_and(p, q).shape() == Dims{2, 3});
  CHECK(logical_and(p, q).to_vector<bool>() == std::vector<bool>{true, false, true, false, false, false});
  CHECK(logical_or(p, q).to_vector<bool>() == std::vector<bool>{true, true, true, true, false, true});
  CHECK(logical_not(q).to_vector<bool>() == std::vector<bool>{false, true, false});
  CHECK(logical_not(transpose(logical_or(p, q), 0, 1)).to_vector<bool>() ==
        std::vector<bool>{false, false, false, true, false, false});
  CHECK_ERROR(DTypeError, logical_and(x, x), "logical_and", "bool", "float32");
  CHECK_ERROR(DTypeError, logical_not(x), "logical_not", "bool", "float32");
}

TEST_CASE("where and masked_fill broadcast all their operands") {
  Tensor cond = from_vector<bool>({true, false}, {2, 1});
  Tensor a = from_vector<double>({1, 2, 3}, {1, 3});
  Tensor b = scalar_tensor(-1, kFloat64);
  Tensor w = where(cond, a, b);
  CHECK(w.shape() == Dims{2, 3});
  CHECK(w.to_vector<double>() == std::vector<double>{1, 2, 3, -1, -1, -1});
  CHECK(where(cond, a, 7.0).to_vector<double>() == std::vector<double>{1, 2, 3, 7, 7, 7});
  // A non-contiguous condition and operand.
  Tensor c2 = transpose(from_vector<bool>({true, false, false, true, true, false}, {2, 3}), 0, 1);  // (3, 2)
  Tensor x2 = transpose(reshape(arange(0, 6, 1, kFloat64), {2, 3}), 0, 1);                         // (3, 2)
  CHECK(where(c2, x2, 0.0).to_vector<double>() == std::vector<double>{0, 3, 0, 4, 0, 0});
  // int64 and bool payloads.
  Tensor i = from_vector<int64_t>({5, 6}, {2});
  CHECK(where(from_vector<bool>({false, true}, {2}), i, scalar_tensor(0, kInt64)).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 6});
  CHECK_ERROR(DTypeError, where(a, a, a), "where", "bool", "float64");
  CHECK_ERROR(DTypeError, (where(cond, a, scalar_tensor(0, kFloat32))), "where", "float64", "float32");
  CHECK_ERROR(ShapeError, (where(from_vector<bool>({true, false}, {2}), a, b)), "where", "(2)", "(1,3)");

  Tensor x = reshape(arange(0, 6, 1, kFloat32), {2, 3});
  Tensor row_mask = from_vector<bool>({false, true, false}, {3});
  CHECK(masked_fill(x, row_mask, -9).to_vector<float>() == std::vector<float>{0, -9, 2, 3, -9, 5});
  CHECK(masked_fill(x, from_vector<bool>({true, false}, {2, 1}), 1.5).to_vector<float>() ==
        std::vector<float>{1.5f, 1.5f, 1.5f, 3, 4, 5});
  CHECK(masked_fill(x, scalar_tensor(1, kBool), 0).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(masked_fill(transpose(x, 0, 1), from_vector<bool>({true, false}, {2}), -std::numeric_limits<float>::infinity())
            .to_vector<double>() == std::vector<double>{-kInf, 3, -kInf, 4, -kInf, 5});
  // The mask must broadcast to x, not the other way round.
  CHECK_ERROR(ShapeError, (masked_fill(x, zeros({4, 2, 3}, kBool), 0)), "masked_fill", "(4,2,3)", "(2,3)");
  CHECK_ERROR(DTypeError, (masked_fill(x, x, 0)), "masked_fill", "bool", "float32");
}

TEST_CASE("int64 arithmetic is exact") {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable in double
  Tensor a = from_vector<int64_t>({big, -7, 0, 3}, {4});
  Tensor b = from_vector<int64_t>({1, 2, -5, 3}, {4});
  CHECK(add(a, b).to_vector<int64_t>() == std::vector<int64_t>{big + 1, -5, -5, 6});
  CHECK(sub(a, b).to_vector<int64_t>() == std::vector<int64_t>{big - 1, -9, 5, 0});
  CHECK(mul(a, b).to_vector<int64_t>() == std::vector<int64_t>{big, -14, 0, 9});
  CHECK(maximum(a, b).to_vector<int64_t>() == std::vector<int64_t>{big, 2, 0, 3});
  CHECK(minimum(a, b).to_vector<int64_t>() == std::vector<int64_t>{1, -7, -5, 3});
  CHECK(add(a, 2.0).to_vector<int64_t>() == std::vector<int64_t>{big + 2, -5, 2, 5});
  CHECK(mul(a, 3.0).to_vector<int64_t>() == std::vector<int64_t>{3 * big, -21, 0, 9});
  CHECK(neg(a).to_vector<int64_t>() == std::vector<int64_t>{-big, 7, 0, -3});
  CHECK(abs(b).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 5, 3});
  CHECK(sign(a).to_vector<int64_t>() == std::vector<int64_t>{1, -1, 0, 1});
  CHECK(clamp(a, -1, 2).to_vector<int64_t>() == std::vector<int64_t>{2, -1, 0, 2});
  // Broadcast int64 against a column.
  Tensor col = from_vector<int64_t>({10, 20}, {2, 1});
  CHECK(add(col, b).to_vector<int64_t>() == std::vector<int64_t>{11, 12, 5, 13, 21, 22, 15, 23});
  // A fractional scalar cannot be applied to an int64 tensor without changing its meaning
  // (arange(4) * 0.5 would silently be all zeros): refused, like a dtype mismatch.
  CHECK_ERROR(DTypeError, mul(a, 0.5), "mul", "0.5", "int64");
  CHECK_ERROR(DTypeError, add(a, -1.25), "add", "-1.25", "int64");
  CHECK_ERROR(DTypeError, (a / 2.0), "mul", "0.5", "int64");
  CHECK(mul(a, -1.0).to_vector<int64_t>() == std::vector<int64_t>{-big, 7, 0, -3});
  CHECK_ERROR(DTypeError, div(a, b), "div", "int64");
  CHECK_ERROR(DTypeError, pow(a, b), "pow", "int64");
  CHECK_ERROR(DTypeError, exp(a), "exp", "int64");
}

TEST_CASE("binary ops refuse mixed dtypes and unbroadcastable shapes, naming both") {
  Tensor f = zeros({2, 3}), d = zeros({3}, kFloat64), i = zeros({3}, kInt64), b = zeros({3}, kBool);
  CHECK_ERROR(DTypeError, add(f, d), "add: dtypes differ", "float32 (2,3)", "float64 (3)");
  CHECK_ERROR(DTypeError, mul(f, i), "mul", "float32", "int64");
  CHECK_ERROR(DTypeError, sub(i, f), "sub", "int64", "float32");
  CHECK_ERROR(DTypeError, maximum(d, f), "maximum", "float64", "float32");
  CHECK_ERROR(DTypeError, lt(f, d), "lt", "float32", "float64");
  CHECK_ERROR(DTypeError, add(b, b), "add", "bool");
  CHECK_ERROR(ShapeError, add(f, zeros({4})), "add", "(2,3)", "(4)", "cannot be broadcast");
  CHECK_ERROR(ShapeError, (pow(zeros({2, 3}), zeros({3, 3}))), "pow", "(2,3)", "(3,3)");
  CHECK_ERROR(ShapeError, (eq(zeros({5}), zeros({2}))), "eq", "(5)", "(2)");
}

TEST_CASE("scalar operands and operators") {
  Tensor x = from_vector<double>({1, 2, 4}, {3});
  CHECK(add(x, 0.5).to_vector<double>() == std::vector<double>{1.5, 2.5, 4.5});
  CHECK(mul(x, -2.0).to_vector<double>() == std::vector<double>{-2, -4, -8});
  CHECK(pow(x, 3.0).to_vector<double>() == std::vector<double>{1, 8, 64});
  CHECK(pow(x, 0.5).to_vector<double>() == std::vector<double>{1, std::sqrt(2.0), 2});
  CHECK(pow(x, -1.0).to_vector<double>() == std::vector<double>{1, 0.5, 0.25});
  CHECK(pow(x, 0.0).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(pow(2.0, x).to_vector<double>() == std::vector<double>{2, 4, 16});
  CHECK((2.0 - x).to_vector<double>() == std::vector<double>{1, 0, -2});
  CHECK((x - 1.0).to_vector<double>() == std::vector<double>{0, 1, 3});
  CHECK((8.0 / x).to_vector<double>() == std::vector<double>{8, 4, 2});
  CHECK((x / 2.0).to_vector<double>() == std::vector<double>{0.5, 1, 2});
  CHECK((3.0 * x + 1.0).to_vector<double>() == std::vector<double>{4, 7, 13});
  CHECK((-x).to_vector<double>() == std::vector<double>{-1, -2, -4});
  CHECK((x * x - x / x).to_vector<double>() == std::vector<double>{0, 3, 15});
}

TEST_CASE("unary functions match the C library (float64 to 1e-15, float32 to a few ulp)") {
  std::vector<double> xs;
  for (int i = -60; i <= 60; ++i) xs.push_back(i * 0.1 + 0.013);
  xs.push_back(0.0);
  xs.push_back(-30.0);
  xs.push_back(30.0);
  std::vector<double> pos;
  for (double v : xs) pos.push_back(std::abs(v) + 0.01);

  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
    bool positive;
    // Tolerances: only GELU and ELU cancel (1 + erf(x) -> 0, exp(x) - 1 -> 0), which costs
    // absolute, not relative, accuracy.
    double atol64 = 0, atol32 = 0;
  };
  auto sigmoid_ref = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<Case> cases = {
      {"exp", [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }, false},
      {"log", [](const Tensor& t) { return log(t); }, [](double v) { return std::log(v); }, true},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }, [](double v) { return std::sqrt(v); }, true},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }, [](double v) { return 1 / std::sqrt(v); }, true},
      {"abs", [](const Tensor& t) { return abs(t); }, [](double v) { return std::abs(v); }, false},
      {"neg", [](const Tensor& t) { return neg(t); }, [](double v) { return -v; }, false},
      {"sign", [](const Tensor& t) { return sign(t); }, [](double v) { return double((v > 0) - (v < 0)); }, false},
      {"square", [](const Tensor& t) { return square(t); }, [](double v) { return v * v; }, false},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }, [](double v) { return 1 / v; }, true},
      {"sin", [](const Tensor& t) { return sin(t); }, [](double v) { return std::sin(v); }, false},
      {"cos", [](const Tensor& t) { return cos(t); }, [](double v) { return std::cos(v); }, false},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double v) { return std::tanh(v); }, false},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, sigmoid_ref, false},
      {"relu", [](const Tensor& t) { return relu(t); }, [](double v) { return v > 0 ? v : 0.0; }, false},
      {"gelu", [](const Tensor& t) { return gelu(t); },
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, false, 1e-15, 1e-6},
      {"gelu tanh", [](const Tensor& t) { return gelu(t, "tanh"); },
       [](double v) {
         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
       },
       false, 1e-15, 1e-6},
      {"elu 0.5", [](const Tensor& t) { return elu(t, 0.5); },
       [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); }, false, 0, 1e-7},
      {"softplus", [](const Tensor& t) { return softplus(t); },
       [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }, false},
      {"softplus beta 2 threshold 3", [](const Tensor& t) { return softplus(t, 2.0, 3.0); },
       [](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; }, false},
      {"clamp", [](const Tensor& t) { return clamp(t, -1.5, 0.75); },
       [](double v) { return std::min(std::max(v, -1.5), 0.75); }, false},
      {"clamp_min", [](const Tensor& t) { return clamp_min(t, 0.2); }, [](double v) { return std::max(v, 0.2); }, false},
      {"clamp_max", [](const Tensor& t) { return clamp_max(t, -0.2); }, [](double v) { return std::min(v, -0.2); }, false},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::vector<double>& in = c.positive ? pos : xs;
    std::vector<double> want;
    for (double v : in) want.push_back(c.ref(v));
    Tensor x64 = from_vector(in, {int64_t(in.size())});
    CHECK(vec_close(c.op(x64).to_vector<double>(), want, 1e-15, c.atol64));
    // float32: the reference is evaluated in double on the rounded float input.
    std::vector<float> in32(in.begin(), in.end());
    std::vector<double> want32;
    for (float v : in32) want32.push_back(c.ref(double(v)));
    Tensor got32 = c.op(from_vector(in32, {int64_t(in32.size())}));
    CHECK(got32.dtype() == kFloat32);
    CHECK(vec_close(got32.to_vector<double>(), want32, 5e-7, c.atol32));
    // A non-contiguous input gives the same values.
    Tensor wide = stack({x64, x64}, 1);  // (n, 2); column 1 has stride 2
    CHECK(c.op(select(wide, 1, 1)).to_vector<double>() == c.op(x64).to_vector<double>());
  }
}

TEST_CASE("unary functions: known values and edge cases") {
  auto one = [](double v) { return from_vector<double>({v}, {1}); };
  // GELU reference values (erf form and tanh form at 1 and -2).
  CHECK(gelu(one(1)).item() == doctest::Approx(0.8413447460685429).epsilon(1e-15));
  CHECK(gelu(one(-2)).item() == doctest::Approx(-0.04550026389635842).epsilon(1e-14));
  CHECK(gelu(one(1), "tanh").item() == doctest::Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(gelu(one(-2), "tanh").item() == doctest::Approx(-0.04540230591222).epsilon(1e-12));
  CHECK_ERROR(ValueError, gelu(one(1), "fast"), "gelu", "\"fast\"");
  // Sigmoid saturates without overflow or NaN on either side.
  Tensor s = sigmoid(from_vector<double>({-800, 800}, {2}));
  CHECK(s.to_vector<double>() == std::vector<double>{0, 1});
  Tensor s32 = sigmoid(from_vector<float>({-200, 200}, {2}));
  CHECK(s32.to_vector<float>() == std::vector<float>{0, 1});
  // Softplus switches to the identity above the threshold, exactly.
  CHECK(softplus(one(25)).item() == 25);
  CHECK(softplus(one(10)).item() == doctest::Approx(std::log1p(std::exp(10.0))).epsilon(1e-15));
  CHECK(softplus(one(2), 2, 3).item() == 2);                  // beta x = 4 > 3
  CHECK(softplus(one(1), 2, 3).item() == std::log1p(std::exp(2.0)) / 2);  // beta x = 2 <= 3
  CHECK(softplus(one(-800)).item() == 0);
  CHECK_ERROR(ValueError, softplus(one(1), 0), "softplus", "beta");
  CHECK(elu(one(-1e3)).item() == -1);
  CHECK(tanh(one(-50)).item() == -1);
  CHECK_ERROR(ValueError, clamp(one(0), 2, 1), "clamp", "2", "1");
  // NaN passes through maximum/minimum from either side.
  Tensor n = one(kNaN), z = one(0);
  CHECK(std::isnan(maximum(n, z).item()));
  CHECK(std::isnan(maximum(z, n).item()));
  CHECK(std::isnan(minimum(n, z).item()));
  CHECK(std::isnan(minimum(z, n).item()));
  CHECK(std::isnan(exp(n).item()));
  CHECK(std::isnan(log(one(-1)).item()));
  CHECK(log(z).item() == -kInf);
  CHECK(sqrt(one(-0.0)).item() == 0);
  CHECK(reciprocal(z).item() == kInf);
}

TEST_CASE("fast float exp: accurate from -80 to 80, exact at the special values") {
  // The float kernels use exp_fast; the public exp op must be just as accurate for float32.
  std::vector<float> xs;
  for (int i = -800000; i <= 800000; i += 7) xs.push_back(float(i) * 1e-4f);
  xs.push_back(-80.0f);
  xs.push_back(80.0f);
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  double worst_fast = 0;
  for (float v : xs) {
    double want = std::exp(double(v));
    worst_fast = std::max(worst_fast, std::abs(double(kernels::exp_fast(v)) - want) / want);
  }
  CHECK(worst_fast < 3e-7);  // a few ulp (float ulp is 1.2e-7 relative at worst)
  std::vector<double> want;
  for (float v : xs) want.push_back(std::exp(double(v)));
  Tensor got = exp(from_vector(xs, {int64_t(xs.size())}));
  CHECK(max_rel_err(got.to_vector<double>(), want) < 3e-7);

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(kernels::exp_fast(-inf) == 0.0f);
  CHECK(kernels::exp_fast(-200.0f) == 0.0f);
  CHECK(kernels::exp_fast(0.0f) == 1.0f);
  CHECK(kernels::exp_fast(inf) == inf);
  CHECK(kernels::exp_fast(100.0f) == inf);
  CHECK(kernels::exp_fast(89.0f) == inf);
  CHECK(std::isnan(kernels::exp_fast(nan)));
  // Just below the overflow threshold exp is still finite and accurate.
  for (float v : {85.0f, 88.0f, 88.5f, 88.7f}) {
    CAPTURE(v);
    float e = kernels::exp_fast(v);
    CHECK(std::isfinite(e));
    CHECK(std::abs(double(e) - std::exp(double(v))) / std::exp(double(v)) < 3e-7);
  }
  // Near the bottom of the normal range it keeps its relative accuracy.
  for (float v : {-85.0f, -87.0f}) {
    CAPTURE(v);
    CHECK(std::abs(double(kernels::exp_fast(v)) - std::exp(double(v))) / std::exp(double(v)) < 3e-7);
  }
  Tensor special = exp(from_vector<float>({-inf, 100.0f, nan, 0.0f}, {4}));
  auto sv = special.to_vector<double>();
  CHECK(sv[0] == 0);
  CHECK(sv[1] == kInf);
  CHECK(std::isnan(sv[2]));
  CHECK(sv[3] == 1);
  CHECK(kernels::exp_fast(-1.0) == std::exp(-1.0));  // the double overload is the C library's
}

TEST_CASE("in-place updates: add_, mul_, fill_, zero_, copy_ on contiguous and strided targets") {
  Tensor x = zeros({2, 3}, kFloat64);
  add_(x, from_vector<double>({1, 2, 3}, {3}));
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  add_(x, from_vector<double>({10, 20}, {2, 1}), 0.5);
  CHECK(x.to_vector<double>() == std::vector<double>{6, 7, 8, 11, 12, 13});
  mul_(x, 2);
  CHECK(x.to_vector<double>() == std::vector<double>{12, 14, 16, 22, 24, 26});
  Tensor col = select(x, 1, 1);
  add_(col, scalar_tensor(1, kFloat64));
  CHECK(x.to_vector<double>() == std::vector<double>{12, 15, 16, 22, 25, 26});
  Tensor t = transpose(x, 0, 1);
  copy_(t, from_vector<double>({0, 1, 2, 3, 4, 5}, {3, 2}));
  CHECK(x.to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
  Tensor f32 = zeros({2});
  copy_(f32, from_vector<int64_t>({3, -4}, {2}));  // converts
  CHECK(f32.to_vector<float>() == std::vector<float>{3, -4});
  fill_(t, 7);
  CHECK(x.to_vector<double>() == std::vector<double>(6, 7.0));
  zero_(x);
  CHECK(x.to_vector<double>() == std::vector<double>(6, 0.0));
  // In place cannot change the target's shape.
  CHECK_ERROR(ShapeError, (add_(col, zeros({3, 2}, kFloat64))), "add_", "(3,2)", "(2)");
  CHECK_ERROR(ShapeError, (copy_(col, zeros({3}, kFloat64))), "copy_", "(3)", "(2)");
  CHECK_ERROR(DTypeError, (add_(x, zeros({3}), 2.0)), "add_", "float64", "float32");
  // A leaf that requires grad is protected while grad mode is on.
  Tensor leaf = zeros({2}).requires_grad_();
  CHECK_ERROR(AutogradError, fill_(leaf, 1), "fill_", "requires grad");
  {
    NoGradGuard ng;
    fill_(leaf, 1);
  }
  CHECK(leaf.to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("the last-level cache size: sysfs sizes parse, and the machine's is plausible") {
  CHECK(kernels::parse_cache_size("32768K") == 32LL << 20);
  CHECK(kernels::parse_cache_size("1M") == 1LL << 20);
  CHECK(kernels::parse_cache_size("65536") == 65536);
  CHECK(kernels::parse_cache_size("512K\n") == 512LL << 10);
  CHECK(kernels::parse_cache_size("") == -1);
  CHECK(kernels::parse_cache_size("big") == -1);
  CHECK(kernels::parse_cache_size("12X") == -1);
  CHECK(kernels::parse_cache_size("99999999999999999999K") == -1);  // past int64: not a size
  CHECK(kernels::parse_cache_size("9000000000000G") == -1);         // fits, but not once in bytes
  CHECK(kernels::parse_cache_size("-4K") == -1);
  // Whatever the machine, an L2 or L3 between 256 KiB and 1 GiB (this VM: 32 MiB).
  CHECK(kernels::last_level_cache_bytes() >= (256LL << 10));
  CHECK(kernels::last_level_cache_bytes() <= (1LL << 30));
}

TEST_CASE("streaming stores write what the plain loop writes, at every alignment and length") {
  // store_run's streaming path has an unaligned head, 32-byte vector stores and a tail; a
  // buffer offset by 0..7 elements and lengths around the vector width reach all three.
  auto check = [](auto zero) {
    using T = decltype(zero);
    std::vector<T> plain(80), streamed(80);
    for (int64_t offset = 0; offset < 8; ++offset)
      for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 33, 64}) {
        std::fill(plain.begin(), plain.end(), T(-1));
        std::fill(streamed.begin(), streamed.end(), T(-1));
        auto g = [](int64_t i) { return T(0.5) * T(i) - T(3); };
        kernels::store_run(plain.data() + offset, n, false, g);
        kernels::store_run(streamed.data() + offset, n, true, g);
        CHECK(plain == streamed);
        CHECK(streamed[offset + n] == T(-1));  // nothing past the end
      }
  };
  check(0.0f);
  check(0.0);
  // And through an op large enough to stream (its operands exceed the last-level cache).
  const int64_t n = kernels::last_level_cache_bytes() / 4 + 1000;  // a and c: 8n bytes > 1.25x the cache
  Tensor a = arange(0, double(n), 1, kFloat32), b = full({1}, 2.0);
  Tensor c = a * b;
  const float* pc = c.data<float>();
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && pc[i] == 2.0f * float(i);
  CHECK(ok);
}

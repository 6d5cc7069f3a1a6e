// Elementwise kernels: unary functions (with their derivative helpers), binary arithmetic and
// comparisons with broadcasting. where, copies and dtype conversion are copy.cpp (two files that
// two cores compile side by side).
#include <cmath>

#include "tensor/kernels.hpp"
#include "tensor/kernels/gelu.hpp"
#include "tensor/kernels/map.hpp"
#include "tensor/kernels/rows.hpp"  // exp_fast: std::exp does not vectorise

namespace attnlab::kernels {
namespace {

const char* unary_name(Unary op) {
  switch (op) {
    case Unary::Neg: return "neg";
    case Unary::Exp: return "exp";
    case Unary::Log: return "log";
    case Unary::Sqrt: return "sqrt";
    case Unary::Rsqrt: return "rsqrt";
    case Unary::Abs: return "abs";
    case Unary::Sign: return "sign";
    case Unary::Tanh: return "tanh";
    case Unary::Sigmoid: return "sigmoid";
    case Unary::Relu: return "relu";
    case Unary::Sin: return "sin";
    case Unary::Cos: return "cos";
    case Unary::Square: return "square";
    case Unary::Reciprocal: return "reciprocal";
    case Unary::GeluErf: case Unary::GeluTanh: return "gelu";
    case Unary::GeluErfGrad: case Unary::GeluTanhGrad: return "gelu_backward";
    case Unary::Elu: case Unary::EluGrad: return "elu";
    case Unary::Softplus: case Unary::SoftplusGrad: return "softplus";
    case Unary::AddScalar: return "add";
    case Unary::MulScalar: return "mul";
    case Unary::PowScalar: case Unary::RPowScalar: return "pow";
    case Unary::Clamp: case Unary::ClampGrad: return "clamp";
    case Unary::Step: return "step";
  }
  return "unary";
}

template <class T>
T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

// Calls run(f) with f the scalar function for `op` on type T.
template <class T, class Run>
void with_unary(Unary op, UnaryParams p, Run&& run) {
  const T a = static_cast<T>(p.p0), b = static_cast<T>(p.p1);
  switch (op) {
    case Unary::Neg: return run([](T x) { return -x; });
    case Unary::Exp: return run([](T x) { return exp_fast(x); });
    case Unary::Log: return run([](T x) { return std::log(x); });
    case Unary::Sqrt: return run([](T x) { return std::sqrt(x); });
    case Unary::Rsqrt: return run([](T x) { return T(1) / std::sqrt(x); });
    case Unary::Abs: return run([](T x) { return std::abs(x); });
    case Unary::Sign: return run([](T x) { return T((x > 0) - (x < 0)); });
    case Unary::Tanh: return run([](T x) { return std::tanh(x); });
    case Unary::Sigmoid: return run([](T x) { return sigmoid(x); });
    case Unary::Relu: return run([](T x) { return x > 0 ? x : T(0); });
    case Unary::Sin: return run([](T x) { return std::sin(x); });
    case Unary::Cos: return run([](T x) { return std::cos(x); });
    case Unary::Square: return run([](T x) { return x * x; });
    case Unary::Reciprocal: return run([](T x) { return T(1) / x; });
    case Unary::GeluErf: return run([](T x) { return gelu_erf(x); });
    case Unary::GeluTanh: return run([](T x) { return gelu_tanh(x); });
    case Unary::GeluErfGrad: return run([](T x) { return gelu_erf_grad(x); });
    case Unary::GeluTanhGrad: return run([](T x) { return gelu_tanh_grad(x); });
    case Unary::Elu: return run([a](T x) { return x > 0 ? x : a * (std::exp(x) - T(1)); });
    case Unary::EluGrad: return run([a](T x) { return x > 0 ? T(1) : a * std::exp(x); });
    case Unary::Softplus:
      return run([a, b](T x) { return a * x > b ? x : std::log1p(std::exp(a * x)) / a; });
    case Unary::SoftplusGrad: return run([a, b](T x) { return a * x > b ? T(1) : sigmoid(a * x); });
    case Unary::AddScalar: return run([a](T x) { return x + a; });
    case Unary::MulScalar: return run([a](T x) { return x * a; });
    case Unary::PowScalar:
      if (p.p0 == 2) return run([](T x) { return x * x; });
      if (p.p0 == 1) return run([](T x) { return x; });
      if (p.p0 == 0.5) return run([](T x) { return std::sqrt(x); });
      return run([a](T x) { return std::pow(x, a); });
    case Unary::RPowScalar: return run([a](T x) { return std::pow(a, x); });
    case Unary::Clamp: return run([a, b](T x) { return x < a ? a : (x > b ? b : x); });
    case Unary::ClampGrad: return run([a, b](T x) { return x >= a && x <= b ? T(1) : T(0); });
    case Unary::Step: return run([](T x) { return x > 0 ? T(1) : T(0); });
  }
}

template <class T, class Run>
void with_unary_int(Unary op, UnaryParams p, Run&& run) {
  // x + 0.5 or x * 0.5 has no int64 value: refuse rather than truncate the scalar to 0.
  if ((op == Unary::AddScalar || op == Unary::MulScalar) && p.p0 != std::trunc(p.p0))
    fail<DTypeError>("{}: the scalar {} is not a whole number but the tensor is int64 (convert with to(x, kFloat32))",
                     unary_name(op), p.p0);
  const T a = static_cast<T>(p.p0), b = static_cast<T>(p.p1);
  switch (op) {
    case Unary::Neg: return run([](T x) { return -x; });
    case Unary::Abs: return run([](T x) { return x < 0 ? -x : x; });
    case Unary::Sign: return run([](T x) { return T((x > 0) - (x < 0)); });
    case Unary::Square: return run([](T x) { return x * x; });
    case Unary::AddScalar: return run([a](T x) { return x + a; });
    case Unary::MulScalar: return run([a](T x) { return x * a; });
    case Unary::Clamp: return run([a, b](T x) { return x < a ? a : (x > b ? b : x); });
    case Unary::Relu: return run([](T x) { return x > 0 ? x : T(0); });
    default:
      fail<DTypeError>("{}: expected a floating dtype (float32 or float64), got int64", unary_name(op));
  }
}

void unary_into(Unary op, const Tensor& out, const Tensor& x, UnaryParams p) {
  if (x.dtype() == kInt64)
    return with_unary_int<int64_t>(op, p, [&](auto f) { map1<int64_t, int64_t>(out, x, f); });
  dispatch_floating(x.dtype(), unary_name(op), [&](auto tag) {
    using T = decltype(tag);
    with_unary<T>(op, p, [&](auto f) { map1<T, T>(out, x, f); });
  });
}

bool is_comparison(Binary op) { return op >= Binary::Eq; }

template <class T, class Run>
void with_binary(Binary op, Run&& run) {
  switch (op) {
    case Binary::Add: return run([](T x, T y) { return T(x + y); });
    case Binary::Sub: return run([](T x, T y) { return T(x - y); });
    case Binary::Mul: return run([](T x, T y) { return T(x * y); });
    case Binary::Div: return run([](T x, T y) { return T(x / y); });
    case Binary::Pow: return run([](T x, T y) { return T(std::pow(x, y)); });
    case Binary::Maximum: return run([](T x, T y) { return x != x ? x : (x > y ? x : y); });
    case Binary::Minimum: return run([](T x, T y) { return x != x ? x : (x < y ? x : y); });
    default: return;
  }
}

template <class T, class Run>
void with_compare(Binary op, Run&& run) {
  switch (op) {
    case Binary::Eq: return run([](T x, T y) { return x == y; });
    case Binary::Ne: return run([](T x, T y) { return x != y; });
    case Binary::Lt: return run([](T x, T y) { return x < y; });
    case Binary::Le: return run([](T x, T y) { return x <= y; });
    case Binary::Gt: return run([](T x, T y) { return x > y; });
    case Binary::Ge: return run([](T x, T y) { return x >= y; });
    case Binary::LogicalAnd: return run([](T x, T y) { return bool(x) && bool(y); });
    case Binary::LogicalOr: return run([](T x, T y) { return bool(x) || bool(y); });
    default: return;
  }
}

void binary_into(Binary op, const Tensor& out, const Tensor& a, const Tensor& b, const char* name) {
  if (a.dtype() != b.dtype())
    fail<DTypeError>("{}: dtypes differ: {} {} and {} {} (convert one with .to())", name, dtype_name(a.dtype()),
                     to_string(a.shape()), dtype_name(b.dtype()), to_string(b.shape()));
  if (is_comparison(op)) {
    if ((op == Binary::LogicalAnd || op == Binary::LogicalOr) && a.dtype() != kBool)
      fail<DTypeError>("{}: expected bool tensors, got {}", name, dtype_name(a.dtype()));
    return dispatch_all(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      with_compare<T>(op, [&](auto f) { map2<bool, T, T>(out, a, b, f); });
    });
  }
  if (a.dtype() == kBool) fail<DTypeError>("{}: expected numeric tensors, got bool", name);
  if (a.dtype() == kInt64 && (op == Binary::Div || op == Binary::Pow))
    fail<DTypeError>("{}: expected floating tensors, got int64 (convert with .to(kFloat32))", name);
  dispatch_numeric(a.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    with_binary<T>(op, [&](auto f) { map2<T, T, T>(out, a, b, f); });
  });
}

}  // namespace

Tensor unary(Unary op, const Tensor& x, UnaryParams p) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  unary_into(op, out, x, p);
  return out;
}

void unary_(Unary op, const Tensor& x, UnaryParams p) { unary_into(op, x, x, p); }

Tensor binary(Binary op, const Tensor& a, const Tensor& b, const char* name) {
  Dims shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, is_comparison(op) ? kBool : a.dtype());
  binary_into(op, out, a, b, name);
  return out;
}

void binary_(Binary op, const Tensor& a, const Tensor& b, const char* name) {
  Dims shape = broadcast_shapes(a.shape(), b.shape(), name);
  if (shape != a.shape())
    fail<ShapeError>("{}_: in-place result shape {} differs from the tensor's shape {}", name, to_string(shape),
                     to_string(a.shape()));
  if (is_comparison(op)) fail<DTypeError>("{}_: comparisons cannot run in place", name);
  binary_into(op, a, a, b, name);
}

void add_scaled_(const Tensor& a, const Tensor& b, double alpha) {
  broadcast_shapes(a.shape(), b.shape(), "add_");
  if (a.dtype() != b.dtype())
    fail<DTypeError>("add_: dtypes differ: {} and {}", dtype_name(a.dtype()), dtype_name(b.dtype()));
  dispatch_floating(a.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    const T s = static_cast<T>(alpha);
    map2<T, T, T>(a, a, b, [s](T x, T y) { return x + s * y; });
  });
}

}  // namespace attnlab::kernels

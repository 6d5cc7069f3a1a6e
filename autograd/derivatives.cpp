// Every differentiable primitive, each with its backward formula right beside its forward
// call. This file is the one place where gradients are defined (like PyTorch's
// derivatives.yaml); ops built from these primitives live in composed.cpp and get their
// gradients for free.
//
// A formula receives `grad` (dL/d result), `result` (saved only when SaveResult::Yes) and the
// node `n` (n.needs_grad(i), n.shapes[i]), and returns one gradient per input. Formulas never
// reduce broadcast dims: the engine sums each gradient to its input's shape.
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {

namespace k = kernels;
using k::Binary;
using k::Unary;

namespace {

Tensor zeros_of(const Dims& shape, DType dtype) { return zeros(shape, dtype); }

// Strides that view x with `shape` without a copy, if possible (PyTorch's computeStride).
bool view_strides(const Dims& old_shape, const Dims& old_strides, const Dims& shape, Dims* out) {
  *out = Dims::filled(shape.size(), 1);
  if (numel_of(old_shape) == 0 || old_shape.empty()) {
    *out = contiguous_strides(shape);
    return true;
  }
  int view_d = shape.size() - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Dims infer_shape(const Dims& shape, int64_t numel, const Dims& from, const char* op) {
  Dims out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail<ShapeError>("{}: only one size may be -1, got {}", op, to_string(shape));
      infer = i;
    } else if (out[i] < 0) {
      fail<ShapeError>("{}: invalid size {} in {}", op, out[i], to_string(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail<ShapeError>("{}: cannot reshape {} ({} elements) to {}", op, to_string(from), numel, to_string(shape));
    out[infer] = numel / known;
  }
  if (numel_of(out) != numel)
    fail<ShapeError>("{}: cannot reshape {} ({} elements) to {} ({} elements)", op, to_string(from), numel,
                     to_string(out), numel_of(out));
  return out;
}

void check_inplace(const Tensor& x, const char* op) {
  if (GradMode::is_enabled() && x.requires_grad())
    fail<AutogradError>("{}: in-place update of a tensor that requires grad; wrap it in a NoGradGuard", op);
}

}  // namespace

// ============================ views ============================

Tensor reshape(const Tensor& x, const Dims& shape) {
  Dims target = infer_shape(shape, x.numel(), x.shape(), "reshape");
  Dims st;
  Tensor out = view_strides(x.shape(), x.strides(), target, &st) ? x.as_strided(target, st, x.offset())
                                                                  : k::contiguous(x).as_strided(target, contiguous_strides(target), 0);
  return record("reshape", out, {x}, [](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{reshape(g, n.shapes[0])};
  });
}

Tensor view(const Tensor& x, const Dims& shape) {
  Dims target = infer_shape(shape, x.numel(), x.shape(), "view");
  Dims st;
  if (!view_strides(x.shape(), x.strides(), target, &st))
    fail<ShapeError>("view: shape {} with strides {} cannot be viewed as {} without a copy; use reshape",
                     to_string(x.shape()), to_string(x.strides()), to_string(target));
  return record("view", x.as_strided(target, st, x.offset()), {x}, [](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{reshape(g, n.shapes[0])};
  });
}

Tensor permute(const Tensor& x, const Dims& order) {
  if (order.size() != x.dim())
    fail<ShapeError>("permute: order {} has {} entries for a tensor with {} dims", to_string(order), order.size(), x.dim());
  Dims sh, st, inverse = Dims::filled(x.dim(), -1);
  for (int i = 0; i < order.size(); ++i) {
    int d = wrap_dim(order[i], x.dim(), "permute");
    if (inverse[d] >= 0) fail<ShapeError>("permute: dim {} repeats in order {}", d, to_string(order));
    inverse[d] = i;
    sh.push_back(x.shape()[d]);
    st.push_back(x.strides()[d]);
  }
  return record("permute", x.as_strided(sh, st, x.offset()), {x},
                [inverse](const Tensor& g, const Tensor&, const Node&) { return Grads{permute(g, inverse)}; });
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int d = wrap_dim(dim, x.dim(), "slice");
  if (x.dim() == 0) fail<ShapeError>("slice: cannot slice a 0-d tensor");
  if (step <= 0) fail<ValueError>("slice: step must be positive, got {}", step);
  const int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Dims sh = x.shape(), st = x.strides();
  sh[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = x.as_strided(sh, st, x.offset() + start * x.strides()[d]);
  return record("slice", out, {x}, [d, start, step](const Tensor& g, const Tensor&, const Node& n) {
    Tensor z = zeros_of(n.shapes[0], g.dtype());
    Dims zs = z.strides();
    zs[d] *= step;
    k::copy_(z.as_strided(g.shape(), zs, start * z.strides()[d]), g);
    return Grads{z};
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  int d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.dim() ? x.shape()[d] : 0;
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    fail<IndexError>("narrow: start {} with length {} is out of range for dim {} of size {} (shape {})", start, length,
                     dim, n, to_string(x.shape()));
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  int d = wrap_dim(dim, x.dim(), "select");
  if (x.dim() == 0) fail<ShapeError>("select: cannot select from a 0-d tensor");
  const int64_t n = x.shape()[d];
  if (index < -n || index >= n)
    fail<IndexError>("select: index {} is out of range for dim {} of size {}", index, dim, n);
  if (index < 0) index += n;
  return squeeze(narrow(x, d, index, 1), d);
}

Tensor expand(const Tensor& x, const Dims& shape) {
  if (shape.size() < x.dim())
    fail<ShapeError>("expand: target {} has fewer dims than the input {}", to_string(shape), to_string(x.shape()));
  Dims target = shape;
  const int lead = shape.size() - x.dim();
  for (int i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (i < lead) fail<ShapeError>("expand: -1 is not allowed for the new leading dim {}", i);
      target[i] = x.shape()[i - lead];
    }
    if (i >= lead && x.shape()[i - lead] != 1 && x.shape()[i - lead] != target[i])
      fail<ShapeError>("expand: cannot expand {} to {}: size {} at dim {} is not 1", to_string(x.shape()),
                       to_string(shape), x.shape()[i - lead], i);
  }
  Tensor out = x.as_strided(target, broadcast_strides(x.shape(), x.strides(), target), x.offset());
  return record("expand", out, {x}, [](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{k::sum_to(g, n.shapes[0])};
  });
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return record("contiguous", k::clone(x), {x}, [](const Tensor& g, const Tensor&, const Node&) { return Grads{g}; });
}

Tensor clone(const Tensor& x) {
  return record("clone", k::clone(x), {x}, [](const Tensor& g, const Tensor&, const Node&) { return Grads{g}; });
}

Tensor to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = k::to_dtype(x, dtype);
  if (!is_floating(dtype)) return out;
  return record("to", out, {x}, [](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{k::to_dtype(g, n.dtypes[0])};
  });
}

// ============================ elementwise: binary ============================

Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", k::binary(Binary::Add, a, b, "add"), {a, b},
                [](const Tensor& g, const Tensor&, const Node&) { return Grads{g, g}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", k::binary(Binary::Sub, a, b, "sub"), {a, b}, [](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{g, n.needs_grad(1) ? neg(g) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return record("mul", k::binary(Binary::Mul, a, b, "mul"), {a, b}, [a, b](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{n.needs_grad(0) ? g * b : Tensor(), n.needs_grad(1) ? g * a : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return record(
      "div", k::binary(Binary::Div, a, b, "div"), {a, b},
      [b](const Tensor& g, const Tensor& result, const Node& n) {
        Tensor ga = g / b;
        return Grads{ga, n.needs_grad(1) ? neg(ga * result) : Tensor()};  // d(a/b)/db = -(a/b)/b
      },
      SaveResult::Yes);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return record(
      "pow", k::binary(Binary::Pow, a, b, "pow"), {a, b},
      [a, b](const Tensor& g, const Tensor& result, const Node& n) {
        Tensor ga, gb;
        // b * a^(b-1) is 0 * inf = NaN at a == 0, b == 0; PyTorch takes it as 0 (a^0 is constant).
        if (n.needs_grad(0)) ga = masked_fill(g * b * pow(a, b - 1.0), eq(b, 0.0), 0.0);
        // d(a^b)/db = a^b log a; taken as 0 where a == 0 and b >= 0 (the limit), like PyTorch.
        if (n.needs_grad(1)) gb = masked_fill(g * result * log(a), logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0);
        return Grads{ga, gb};
      },
      SaveResult::Yes);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return record("maximum", k::binary(Binary::Maximum, a, b, "maximum"), {a, b},
                [a, b](const Tensor& g, const Tensor&, const Node&) {
                  // Ties split the gradient evenly, like PyTorch.
                  Tensor half = g * 0.5, tie = eq(a, b);
                  return Grads{where(tie, half, where(gt(a, b), g, 0.0)), where(tie, half, where(lt(a, b), g, 0.0))};
                });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return record("minimum", k::binary(Binary::Minimum, a, b, "minimum"), {a, b},
                [a, b](const Tensor& g, const Tensor&, const Node&) {
                  Tensor half = g * 0.5, tie = eq(a, b);
                  return Grads{where(tie, half, where(lt(a, b), g, 0.0)), where(tie, half, where(gt(a, b), g, 0.0))};
                });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return record("where", k::where(cond, a, b), {a, b}, [cond](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{n.needs_grad(0) ? where(cond, g, 0.0) : Tensor(),
                 n.needs_grad(1) ? masked_fill(g, cond, 0.0) : Tensor()};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_tensor(b, a.dtype())); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  if (mask.dtype() != kBool) fail<DTypeError>("masked_fill: the mask must be bool, got {}", dtype_name(mask.dtype()));
  Dims b = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  if (b != x.shape())
    fail<ShapeError>("masked_fill: mask of shape {} does not broadcast to the input shape {}", to_string(mask.shape()),
                     to_string(x.shape()));
  return record("masked_fill", k::where(mask, scalar_tensor(value, x.dtype()), x), {x},
                [mask](const Tensor& g, const Tensor&, const Node&) { return Grads{masked_fill(g, mask, 0.0)}; });
}

// ============================ elementwise: with a scalar ============================

Tensor add(const Tensor& a, double b) {
  return record("add", k::unary(Unary::AddScalar, a, {b}), {a},
                [](const Tensor& g, const Tensor&, const Node&) { return Grads{g}; });
}

Tensor mul(const Tensor& a, double b) {
  return record("mul", k::unary(Unary::MulScalar, a, {b}), {a},
                [b](const Tensor& g, const Tensor&, const Node&) { return Grads{g * b}; });
}

Tensor pow(const Tensor& a, double e) {
  return record("pow", k::unary(Unary::PowScalar, a, {e}), {a}, [a, e](const Tensor& g, const Tensor&, const Node&) {
    if (e == 0) return Grads{zeros_like(g)};
    return Grads{g * (e * pow(a, e - 1))};
  });
}

Tensor pow(double base, const Tensor& e) {
  return record(
      "pow", k::unary(Unary::RPowScalar, e, {base}), {e},
      [base](const Tensor& g, const Tensor& result, const Node&) { return Grads{g * result * std::log(base)}; },
      SaveResult::Yes);
}

// ============================ elementwise: unary ============================

Tensor neg(const Tensor& x) {
  return record("neg", k::unary(Unary::Neg, x), {x},
                [](const Tensor& g, const Tensor&, const Node&) { return Grads{neg(g)}; });
}

Tensor exp(const Tensor& x) {
  return record(
      "exp", k::unary(Unary::Exp, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{g * result}; }, SaveResult::Yes);
}

Tensor log(const Tensor& x) {
  return record("log", k::unary(Unary::Log, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{g / x}; });
}

Tensor sqrt(const Tensor& x) {
  return record(
      "sqrt", k::unary(Unary::Sqrt, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{g / (result * 2.0)}; }, SaveResult::Yes);
}

Tensor rsqrt(const Tensor& x) {
  return record(
      "rsqrt", k::unary(Unary::Rsqrt, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{g * pow(result, 3.0) * -0.5}; },
      SaveResult::Yes);
}

Tensor abs(const Tensor& x) {
  return record("abs", k::unary(Unary::Abs, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{g * sign(x)}; });
}

Tensor sign(const Tensor& x) { return k::unary(Unary::Sign, x); }

Tensor square(const Tensor& x) {
  return record("square", k::unary(Unary::Square, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{g * x * 2.0}; });
}

Tensor reciprocal(const Tensor& x) {
  return record(
      "reciprocal", k::unary(Unary::Reciprocal, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{neg(g * result * result)}; },
      SaveResult::Yes);
}

Tensor sin(const Tensor& x) {
  return record("sin", k::unary(Unary::Sin, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{g * cos(x)}; });
}

Tensor cos(const Tensor& x) {
  return record("cos", k::unary(Unary::Cos, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{neg(g * sin(x))}; });
}

Tensor tanh(const Tensor& x) {
  return record(
      "tanh", k::unary(Unary::Tanh, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{g * (1.0 - result * result)}; },
      SaveResult::Yes);
}

Tensor sigmoid(const Tensor& x) {
  return record(
      "sigmoid", k::unary(Unary::Sigmoid, x), {x},
      [](const Tensor& g, const Tensor& result, const Node&) { return Grads{g * result * (1.0 - result)}; },
      SaveResult::Yes);
}

Tensor relu(const Tensor& x) {
  return record("relu", k::unary(Unary::Relu, x), {x},
                [x](const Tensor& g, const Tensor&, const Node&) { return Grads{g * k::unary(Unary::Step, x)}; });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate != "none" && approximate != "tanh")
    fail<ValueError>("gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  const bool tanh_form = approximate == "tanh";
  if (ConservativeMode::is_enabled()) {
    // LRP: gelu(x) = x * r(x) with r = gelu(x) / x (Phi(x) for the exact form; 1/2 at x = 0)
    // held constant, so the gradient x input of the output equals that of the input.
    Tensor y = k::unary(tanh_form ? Unary::GeluTanh : Unary::GeluErf, x);
    Tensor ratio;
    {
      NoGradGuard no_grad;
      Tensor nonzero = ne(x, 0.0);                                  // bool, x's shape
      ratio = where(nonzero, div(y, where(nonzero, x, 1.0)), 0.5);  // x's shape, no history
    }
    return mul(x, ratio);
  }
  return record("gelu", k::unary(tanh_form ? Unary::GeluTanh : Unary::GeluErf, x), {x},
                [x, tanh_form](const Tensor& g, const Tensor&, const Node&) {
                  return Grads{g * k::unary(tanh_form ? Unary::GeluTanhGrad : Unary::GeluErfGrad, x)};
                });
}

Tensor elu(const Tensor& x, double alpha) {
  return record("elu", k::unary(Unary::Elu, x, {alpha}), {x}, [x, alpha](const Tensor& g, const Tensor&, const Node&) {
    return Grads{g * k::unary(Unary::EluGrad, x, {alpha})};
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (beta == 0) fail<ValueError>("softplus: beta must be nonzero");
  return record("softplus", k::unary(Unary::Softplus, x, {beta, threshold}), {x},
                [x, beta, threshold](const Tensor& g, const Tensor&, const Node&) {
                  return Grads{g * k::unary(Unary::SoftplusGrad, x, {beta, threshold})};
                });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (lo > hi) fail<ValueError>("clamp: min ({}) is greater than max ({})", lo, hi);
  return record("clamp", k::unary(Unary::Clamp, x, {lo, hi}), {x}, [x, lo, hi](const Tensor& g, const Tensor&, const Node&) {
    return Grads{g * k::unary(Unary::ClampGrad, x, {lo, hi})};
  });
}

// ============================ comparisons (no gradient) ============================

Tensor eq(const Tensor& a, const Tensor& b) { return k::binary(Binary::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return k::binary(Binary::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return k::binary(Binary::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return k::binary(Binary::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return k::binary(Binary::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return k::binary(Binary::Ge, a, b, "ge"); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return k::binary(Binary::LogicalAnd, a, b, "logical_and"); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return k::binary(Binary::LogicalOr, a, b, "logical_or"); }
Tensor logical_not(const Tensor& x) { return k::logical_not(x); }

// ============================ reductions ============================

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = k::sum(x, dims, keepdim);
  return record("sum", out, {x}, [dims, keepdim](const Tensor& g, const Tensor&, const Node& n) {
    const Dims& in = n.shapes[0];
    Tensor gk = g;
    if (!keepdim) {  // put the reduced dims back as size 1, then broadcast
      Dims kept = in;
      if (dims.empty()) {
        for (int64_t& s : kept) s = 1;
      } else {
        for (int64_t d : dims) kept[wrap_dim(d, in.size(), "sum")] = 1;
      }
      gk = reshape(g, kept);
    }
    return Grads{gk.as_strided(in, broadcast_strides(gk.shape(), gk.strides(), in), gk.offset())};
  });
}

Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask) {
  // LRP's AH-rule: the probabilities are constants (grad_mode.hpp, ConservativeMode).
  if (ConservativeMode::is_enabled()) return k::softmax(x, dim, mask, false);
  return record(
      "softmax", k::softmax(x, dim, mask, false), {x},
      [dim](const Tensor& g, const Tensor& result, const Node&) {
        return Grads{k::softmax_backward(g, result, dim, false)};
      },
      SaveResult::Yes);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Tensor& mask) {
  return record(
      "log_softmax", k::softmax(x, dim, mask, true), {x},
      [dim](const Tensor& g, const Tensor& result, const Node&) {
        return Grads{k::softmax_backward(g, result, dim, true)};
      },
      SaveResult::Yes);
}

// ============================ matrix product ============================

namespace {

// a^T-style product for the weight gradient of x (..., n, k) @ w (k, m): folding every batch
// dim into the rows makes it one gemm, (k, B*n) @ (B*n, m), instead of B gemms and a sum.
Tensor fold_batch_weight_grad(const Tensor& a, const Tensor& g) {
  Tensor a2 = k::contiguous(a), g2 = k::contiguous(g);
  const int64_t kk = a.shape().back(), m = g.shape().back(), rows = a.numel() / std::max<int64_t>(kk, 1);
  Tensor at = a2.as_strided(Dims{kk, rows}, Dims{1, kk}, 0);  // (k, B*n), a transposed view
  return k::matmul(at, g2.as_strided(Dims{rows, m}, Dims{m, 1}, 0));
}

Tensor mT(const Tensor& x) {
  Dims sh = x.shape(), st = x.strides();
  std::swap(sh[sh.size() - 1], sh[sh.size() - 2]);
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return x.as_strided(sh, st, x.offset());
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0)
    fail<ShapeError>("matmul: both operands need at least 1 dim, got {} and {}", to_string(a.shape()), to_string(b.shape()));
  if (a.dim() == 1 && b.dim() == 1) return reshape(matmul(unsqueeze(a, 0), unsqueeze(b, 1)), Dims{});  // dot
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);  // (k) -> (1, k)
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);  // (k) -> (k, 1)
  return record("matmul", k::matmul(a, b), {a, b}, [a, b](const Tensor& g, const Tensor&, const Node& n) {
    Tensor ga, gb;
    if (n.needs_grad(0)) ga = k::matmul(g, mT(b));  // (..., n, m) @ (..., m, k)
    if (n.needs_grad(1)) gb = (b.dim() == 2 && a.dim() > 2) ? fold_batch_weight_grad(a, g) : k::matmul(mT(a), g);
    return Grads{ga, gb};
  });
}

// ============================ structure and indexing ============================

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = k::cat(xs, dim);
  const int d = wrap_dim(dim, xs[0].dim(), "cat");
  return record("cat", out, xs, [d](const Tensor& g, const Tensor&, const Node& n) {
    Grads grads;
    int64_t at = 0;
    for (size_t i = 0; i < n.shapes.size(); ++i) {
      const int64_t len = n.shapes[i][d];
      grads.push_back(n.needs_grad(i) ? narrow(g, d, at, len) : Tensor());
      at += len;
    }
    return grads;
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return record("gather", k::gather(x, dim, index), {x}, [dim, index](const Tensor& g, const Tensor&, const Node& n) {
    return Grads{k::scatter_add(zeros_of(n.shapes[0], g.dtype()), dim, index, k::contiguous(g))};
  });
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return record("scatter_add", k::scatter_add(self, dim, index, src), {self, src},
                [dim, index](const Tensor& g, const Tensor&, const Node& n) {
                  return Grads{g, n.needs_grad(1) ? k::gather(g, dim, index) : Tensor()};
                });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return record("index_select", k::index_select(x, dim, index), {x},
                [dim, index](const Tensor& g, const Tensor&, const Node& n) {
                  Tensor z = zeros_of(n.shapes[0], g.dtype());
                  k::index_add_(z, dim, index, k::contiguous(g));
                  return Grads{z};
                });
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  return record("cumsum", k::cumsum(x, dim), {x},
                [dim](const Tensor& g, const Tensor&, const Node&) { return Grads{k::cumsum(g, dim, true)}; });
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return record("tril", k::tril(x, diagonal, false), {x},
                [diagonal](const Tensor& g, const Tensor&, const Node&) { return Grads{k::tril(g, diagonal, false)}; });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return record("triu", k::tril(x, diagonal, true), {x},
                [diagonal](const Tensor& g, const Tensor&, const Node&) { return Grads{k::tril(g, diagonal, true)}; });
}

// ============================ in place ============================

Tensor& add_(Tensor& x, const Tensor& other, double alpha) {
  check_inplace(x, "add_");
  if (alpha == 1.0)
    k::binary_(Binary::Add, x, other, "add_");
  else
    k::add_scaled_(x, other, alpha);
  return x;
}

Tensor& mul_(Tensor& x, double value) {
  check_inplace(x, "mul_");
  k::unary_(Unary::MulScalar, x, {value});
  return x;
}

Tensor& copy_(Tensor& x, const Tensor& src) {
  check_inplace(x, "copy_");
  k::copy_(x, src);
  return x;
}

Tensor& fill_(Tensor& x, double value) {
  check_inplace(x, "fill_");
  k::fill_(x, value);
  return x;
}

Tensor& zero_(Tensor& x) { return fill_(x, 0); }

}  // namespace attnlab

// ============================ fused cross-entropy (declared in nn/loss.hpp) ============================
// One primitive for log-softmax + NLL + label smoothing + reduction over logits (R, C) and int64
// targets (R) (kernels/loss.cpp). Backward keeps the logits and the per-row log-sum-exp, never
// the (R, C) probabilities. reduction "none" gives (R) (0 on ignored rows); "sum" a scalar;
// "mean" the sum divided by the number of non-ignored rows (NaN when there are none, as in
// PyTorch). Tested against nn::cross_entropy_composed.
namespace attnlab {

Tensor cross_entropy_fused(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing,
                           const std::string& reduction) {
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail<ValueError>("cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got \"{}\"", reduction);
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    fail<ValueError>("cross_entropy: label_smoothing must be in [0, 1], got {}", label_smoothing);
  auto [loss, lse] = k::cross_entropy_rows(logits, targets, ignore_index, label_smoothing);  // (R), (R)
  Tensor result = loss;
  double scale = 1;  // d result / d loss_r for the reductions
  if (reduction != "none") {
    result = k::sum(loss, {}, false);  // ()
    if (reduction == "mean") {
      Tensor t = k::contiguous(targets);
      const int64_t* pt = t.data<int64_t>();
      int64_t count = 0;
      for (int64_t r = 0; r < t.numel(); ++r) count += pt[r] != ignore_index;
      scale = 1.0 / double(count);  // inf when every row is ignored: 0 * inf gives PyTorch's NaN
      result = k::unary(Unary::MulScalar, result, {scale});
    }
  }
  return record("cross_entropy", result, {logits},
                [logits, targets, lse, scale, ignore_index, label_smoothing](const Tensor& g, const Tensor&, const Node&) {
                  return Grads{k::cross_entropy_rows_backward(g, scale, logits, targets, lse, ignore_index,
                                                              label_smoothing)};
                });
}

}  // namespace attnlab

// ============================ fused training-step ops (declared in autograd/ops.hpp) ============================
// Layer norm (optionally of a residual sum) and bias + GELU as single primitives over rows
// (kernels/fused.cpp), for the transformer's training step. Their backward formulas compute the
// bias and weight gradients themselves, already reduced to (D): summing over the rows in the
// same pass that writes dx saves reading the (R, D) gradient again (the engine's sum_to is then
// a no-op). Tested against the composed forms (tests/autograd/test_fused_vs_composed.cpp).
namespace attnlab {

namespace {

// The layer-norm node of s (the normalised input, with history): backward recomputes the
// normalised values from s, the saved per-row mean and rstd, and the weight.
Tensor record_layer_norm(const Tensor& s, const Tensor& weight, const Tensor& bias, const k::LayerNormOut& out) {
  return record("layer_norm", out.y, {s, weight, bias},
                [s = s.detach(), weight = weight.defined() ? weight.detach() : Tensor(), mean = out.mean,
                 rstd = out.rstd](const Tensor& g, const Tensor&, const Node& n) {
                  k::LayerNormGrads r = k::layer_norm_backward(g, s, mean, rstd, weight, n.needs_grad(0),
                                                               n.needs_grad(1), n.needs_grad(2));
                  return Grads{r.dx, r.dweight, r.dbias};
                });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (ConservativeMode::is_enabled()) return layer_norm_composed(x, weight, bias, eps);
  return record_layer_norm(x, weight, bias, k::layer_norm(x, {}, weight, bias, eps));
}

AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps) {
  if (!residual.defined()) fail<ValueError>("add_layer_norm: residual is undefined (use layer_norm)");
  if (ConservativeMode::is_enabled()) {
    Tensor s = add(x, residual);
    return {s, layer_norm_composed(s, weight, bias, eps)};
  }
  k::LayerNormOut out = k::layer_norm(x, residual, weight, bias, eps);
  // Two nodes from one pass: the sum (whose gradient, identity to both inputs, the engine
  // reduces to the residual's shape) and the norm of the sum.
  Tensor s = record("add", out.sum, {x, residual},
                    [](const Tensor& g, const Tensor&, const Node&) { return Grads{g, g}; });
  return {s, record_layer_norm(s, weight, bias, out)};
}

Tensor bias_gelu(const Tensor& x, const Tensor& bias, const std::string& approximate) {
  if (approximate != "none" && approximate != "tanh")
    fail<ValueError>("bias_gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  if (!bias.defined()) fail<ValueError>("bias_gelu: bias is undefined (use gelu)");
  const bool tanh_form = approximate == "tanh";
  if (ConservativeMode::is_enabled()) return gelu(add(x, bias), approximate);  // gelu's LRP rule
  return record("bias_gelu", k::bias_gelu(x, bias, tanh_form), {x, bias},
                [x = x.detach(), bias = bias.detach(), tanh_form](const Tensor& g, const Tensor&, const Node& n) {
                  auto [dx, dbias] = k::bias_gelu_backward(g, x, bias, tanh_form, n.needs_grad(1));
                  return Grads{dx, dbias};
                });
}

}  // namespace attnlab

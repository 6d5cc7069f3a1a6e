// The differentiable primitives of autograd/ops.hpp, each with its backward formula right beside
// its forward call (like PyTorch's derivatives.yaml); ops built from these primitives live in
// composed.cpp and einsum.cpp and get their gradients for free. Ops without a gradient
// (comparisons, in-place updates) are in no_grad_ops.cpp.
//
// A formula is a lambda (grad, result, n): `grad` is dL/d result, `result` the forward output
// (saved only when SaveResult::Yes), `n` the node (n.needs_grad(i), n.shapes[i]); it returns one
// gradient per input. Formulas never reduce broadcast dims: the engine sums each gradient to its
// input's shape.
//
// Fused kernels whose backward is hand-written beside the kernel, the other record() sites:
//   nn/attention/kernels/tile_attention.cpp  tile_attention()   tiled (flash) attention over a
//       tile pattern: softmax / sigmoid / softpick of scale Q K^T (+ alibi, softcap, sinks) times V;
//       gradients of q, k, v and the sinks from the saved log-sum-exp
//       (tests/efficient/test_tile_attention.cpp)
//   nn/attention/kernels/linear_scan.cpp     causal_product()   the prefix sums of outer products
//       o_n = sum_{m <= n} (a_n . b_m) c_m of causal linear attention; gradients of a, b, c are
//       the same scan run forwards or backwards (tests/efficient/test_linear_attention.cpp)
//   nn/attention/kernels/decay_scan.cpp      decayed_exclusive_scan()   the block states of
//       chunked retention, S[j] = decay S[j-1] + A[j-1]; its gradient is the same scan run
//       backwards (tests/attention/test_retention.cpp)
//   nn/attention/kernels/fourier_mix.cpp     fourier_mix()      FNet's Re(FFT_seq(FFT_hidden(x)));
//       the map is self-adjoint, so its gradient is the same transform of grad
//       (tests/efficient/test_fnet.cpp)
//   nn/attention/routing.cpp                 grouped_scores()   per-cluster blocks Q_g K_g^T of the
//       routing transformer's scores; gradients dQ_g = dS_g K_g, dK_g = dS_g^T Q_g
//   nn/attention/routing.cpp                 grouped_values()   per-cluster products P_g V_g;
//       gradients dP_g = dO_g V_g^T, dV_g = P_g^T dO_g (both routing ops:
//       tests/efficient/test_routing.cpp)
#include <cmath>
#include <numeric>

#include "autograd/autocast.hpp"
#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"
#include "tensor/strides.hpp"

namespace attnlab {

namespace k = kernels;
using k::Binary;
using k::Unary;

namespace {

Tensor zeros_of(const Dims& shape, DType dtype) { return zeros(shape, dtype); }

}  // namespace

// ============================ views ============================

Tensor reshape(const Tensor& x, const Dims& shape) {
  Dims target = infer_shape(shape, x.numel(), x.shape(), "reshape");
  Dims st;
  Tensor out = view_strides(x.shape(), x.strides(), target, &st) ? x.as_strided(target, st, x.offset())
                                                                  : k::contiguous(x).as_strided(target, contiguous_strides(target), 0);
  return record("reshape", out, {x}, [](const Tensor& grad, const Tensor&, const Node& n) {
    return Grads{reshape(grad, n.shapes[0])};
  });
}

Tensor view(const Tensor& x, const Dims& shape) {
  Dims target = infer_shape(shape, x.numel(), x.shape(), "view");
  Dims st;
  if (!view_strides(x.shape(), x.strides(), target, &st))
    fail<ShapeError>("view: shape {} with strides {} cannot be viewed as {} without a copy; use reshape",
                     to_string(x.shape()), to_string(x.strides()), to_string(target));
  return record("view", x.as_strided(target, st, x.offset()), {x},
                [](const Tensor& grad, const Tensor&, const Node& n) { return Grads{reshape(grad, n.shapes[0])}; });
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
                [inverse](const Tensor& grad, const Tensor&, const Node&) { return Grads{permute(grad, inverse)}; });
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
  return record("slice", out, {x}, [d, start, step](const Tensor& grad, const Tensor&, const Node& n) {
    Tensor z = zeros_of(n.shapes[0], grad.dtype());
    Dims zs = z.strides();
    zs[d] *= step;
    k::copy_(z.as_strided(grad.shape(), zs, start * z.strides()[d]), grad);
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
  return record("expand", out, {x}, [](const Tensor& grad, const Tensor&, const Node& n) {
    return Grads{k::sum_to(grad, n.shapes[0])};
  });
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return record("contiguous", k::clone(x), {x},
                [](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad}; });
}

Tensor clone(const Tensor& x) {
  return record("clone", k::clone(x), {x}, [](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad}; });
}

Tensor to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = k::to_dtype(x, dtype);
  if (!is_floating(dtype)) return out;
  return record("to", out, {x}, [](const Tensor& grad, const Tensor&, const Node& n) {
    return Grads{k::to_dtype(grad, n.dtypes[0])};
  });
}

// ============================ elementwise: binary ============================

Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", k::binary(Binary::Add, a, b, "add"), {a, b},
                [](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad, grad}; });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", k::binary(Binary::Sub, a, b, "sub"), {a, b},
                [](const Tensor& grad, const Tensor&, const Node& n) {
                  return Grads{grad, n.needs_grad(1) ? neg(grad) : Tensor()};
                });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return record("mul", k::binary(Binary::Mul, a, b, "mul"), {a, b},
                [a, b](const Tensor& grad, const Tensor&, const Node& n) {
                  return Grads{n.needs_grad(0) ? grad * b : Tensor(), n.needs_grad(1) ? grad * a : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return record(
      "div", k::binary(Binary::Div, a, b, "div"), {a, b},
      [b](const Tensor& grad, const Tensor& result, const Node& n) {
        Tensor ga = grad / b;
        return Grads{ga, n.needs_grad(1) ? neg(ga * result) : Tensor()};  // d(a/b)/db = -(a/b)/b
      },
      SaveResult::Yes);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return record(
      "pow", k::binary(Binary::Pow, a, b, "pow"), {a, b},
      [a, b](const Tensor& grad, const Tensor& result, const Node& n) {
        Tensor ga, gb;
        // b * a^(b-1) is 0 * inf = NaN at a == 0, b == 0; PyTorch takes it as 0 (a^0 is constant).
        if (n.needs_grad(0)) ga = masked_fill(grad * b * pow(a, b - 1.0), eq(b, 0.0), 0.0);
        // d(a^b)/db = a^b log a; taken as 0 where a == 0 and b >= 0 (the limit), like PyTorch.
        if (n.needs_grad(1)) gb = masked_fill(grad * result * log(a), logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0);
        return Grads{ga, gb};
      },
      SaveResult::Yes);
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  return record("maximum", k::binary(Binary::Maximum, a, b, "maximum"), {a, b},
                [a, b](const Tensor& grad, const Tensor&, const Node&) {
                  // Ties split the gradient evenly, like PyTorch.
                  Tensor half = grad * 0.5, tie = eq(a, b);
                  return Grads{where(tie, half, where(gt(a, b), grad, 0.0)),
                               where(tie, half, where(lt(a, b), grad, 0.0))};
                });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return record("minimum", k::binary(Binary::Minimum, a, b, "minimum"), {a, b},
                [a, b](const Tensor& grad, const Tensor&, const Node&) {
                  Tensor half = grad * 0.5, tie = eq(a, b);
                  return Grads{where(tie, half, where(lt(a, b), grad, 0.0)),
                               where(tie, half, where(gt(a, b), grad, 0.0))};
                });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return record("where", k::where(cond, a, b), {a, b}, [cond](const Tensor& grad, const Tensor&, const Node& n) {
    return Grads{n.needs_grad(0) ? where(cond, grad, 0.0) : Tensor(),
                 n.needs_grad(1) ? masked_fill(grad, cond, 0.0) : Tensor()};
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
                [mask](const Tensor& grad, const Tensor&, const Node&) { return Grads{masked_fill(grad, mask, 0.0)}; });
}

// ============================ elementwise: with a scalar ============================

Tensor add(const Tensor& a, double b) {
  return record("add", k::unary(Unary::AddScalar, a, {b}), {a},
                [](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad}; });
}

Tensor mul(const Tensor& a, double b) {
  return record("mul", k::unary(Unary::MulScalar, a, {b}), {a},
                [b](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad * b}; });
}

Tensor pow(const Tensor& a, double e) {
  return record("pow", k::unary(Unary::PowScalar, a, {e}), {a}, [a, e](const Tensor& grad, const Tensor&, const Node&) {
    if (e == 0) return Grads{zeros_like(grad)};
    return Grads{grad * (e * pow(a, e - 1))};
  });
}

Tensor pow(double base, const Tensor& e) {
  return record(
      "pow", k::unary(Unary::RPowScalar, e, {base}), {e},
      [base](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad * result * std::log(base)}; },
      SaveResult::Yes);
}

// ============================ elementwise: unary ============================

Tensor neg(const Tensor& x) {
  return record("neg", k::unary(Unary::Neg, x), {x},
                [](const Tensor& grad, const Tensor&, const Node&) { return Grads{neg(grad)}; });
}

Tensor exp(const Tensor& x) {
  return record(
      "exp", k::unary(Unary::Exp, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad * result}; }, SaveResult::Yes);
}

Tensor log(const Tensor& x) {
  return record("log", k::unary(Unary::Log, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad / x}; });
}

Tensor sqrt(const Tensor& x) {
  return record(
      "sqrt", k::unary(Unary::Sqrt, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad / (result * 2.0)}; },
      SaveResult::Yes);
}

Tensor rsqrt(const Tensor& x) {
  return record(
      "rsqrt", k::unary(Unary::Rsqrt, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad * pow(result, 3.0) * -0.5}; },
      SaveResult::Yes);
}

Tensor abs(const Tensor& x) {
  return record("abs", k::unary(Unary::Abs, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad * sign(x)}; });
}

Tensor sign(const Tensor& x) { return k::unary(Unary::Sign, x); }

Tensor square(const Tensor& x) {
  return record("square", k::unary(Unary::Square, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad * x * 2.0}; });
}

Tensor reciprocal(const Tensor& x) {
  return record(
      "reciprocal", k::unary(Unary::Reciprocal, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{neg(grad * result * result)}; },
      SaveResult::Yes);
}

Tensor sin(const Tensor& x) {
  return record("sin", k::unary(Unary::Sin, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad * cos(x)}; });
}

Tensor cos(const Tensor& x) {
  return record("cos", k::unary(Unary::Cos, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{neg(grad * sin(x))}; });
}

Tensor tanh(const Tensor& x) {
  return record(
      "tanh", k::unary(Unary::Tanh, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad * (1.0 - result * result)}; },
      SaveResult::Yes);
}

Tensor sigmoid(const Tensor& x) {
  return record(
      "sigmoid", k::unary(Unary::Sigmoid, x), {x},
      [](const Tensor& grad, const Tensor& result, const Node&) { return Grads{grad * result * (1.0 - result)}; },
      SaveResult::Yes);
}

Tensor relu(const Tensor& x) {
  return record("relu", k::unary(Unary::Relu, x), {x},
                [x](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad * k::unary(Unary::Step, x)}; });
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
                [x, tanh_form](const Tensor& grad, const Tensor&, const Node&) {
                  return Grads{grad * k::unary(tanh_form ? Unary::GeluTanhGrad : Unary::GeluErfGrad, x)};
                });
}

Tensor elu(const Tensor& x, double alpha) {
  return record("elu", k::unary(Unary::Elu, x, {alpha}), {x},
                [x, alpha](const Tensor& grad, const Tensor&, const Node&) {
                  return Grads{grad * k::unary(Unary::EluGrad, x, {alpha})};
                });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (beta == 0) fail<ValueError>("softplus: beta must be nonzero");
  return record("softplus", k::unary(Unary::Softplus, x, {beta, threshold}), {x},
                [x, beta, threshold](const Tensor& grad, const Tensor&, const Node&) {
                  return Grads{grad * k::unary(Unary::SoftplusGrad, x, {beta, threshold})};
                });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (lo > hi) fail<ValueError>("clamp: min ({}) is greater than max ({})", lo, hi);
  return record("clamp", k::unary(Unary::Clamp, x, {lo, hi}), {x},
                [x, lo, hi](const Tensor& grad, const Tensor&, const Node&) {
                  return Grads{grad * k::unary(Unary::ClampGrad, x, {lo, hi})};
                });
}

// ============================ reductions ============================

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor out = k::sum(x, dims, keepdim);
  return record("sum", out, {x}, [dims, keepdim](const Tensor& grad, const Tensor&, const Node& n) {
    const Dims& in = n.shapes[0];
    Tensor gk = grad;
    if (!keepdim) {  // put the reduced dims back as size 1, then broadcast
      Dims kept = in;
      if (dims.empty()) {
        for (int64_t& s : kept) s = 1;
      } else {
        for (int64_t d : dims) kept[wrap_dim(d, in.size(), "sum")] = 1;
      }
      gk = reshape(grad, kept);
    }
    return Grads{gk.as_strided(in, broadcast_strides(gk.shape(), gk.strides(), in), gk.offset())};
  });
}

Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask) {
  // LRP's AH-rule: the probabilities are constants (grad_mode.hpp, ConservativeMode).
  if (ConservativeMode::is_enabled()) return k::softmax(x, dim, mask, false);
  return record(
      "softmax", k::softmax(x, dim, mask, false), {x},
      [dim](const Tensor& grad, const Tensor& result, const Node&) {
        return Grads{k::softmax_backward(grad, result, dim, false)};
      },
      SaveResult::Yes);
}

Tensor log_softmax(const Tensor& x, int64_t dim, const Tensor& mask) {
  return record(
      "log_softmax", k::softmax(x, dim, mask, true), {x},
      [dim](const Tensor& grad, const Tensor& result, const Node&) {
        return Grads{k::softmax_backward(grad, result, dim, true)};
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

// The gradient of b in x (..., n, k) @ b (k, m), laid out like b. When b is the transposed view
// of a contiguous (m, k) matrix (a Linear's transpose(weight, 0, 1), a tied LM head), the product
// is computed as g^T x, (m, k) contiguous, and returned as its transposed view: the transpose's
// backward then hands the weight a contiguous gradient, which .grad adopts or adds without strides
// (computed in b's (k, m) layout it would be a transposed copy or a strided add per step).
Tensor weight_grad(const Tensor& a, const Tensor& g, const Tensor& b) {
  const bool transposed = b.dim() == 2 && b.size(0) > 1 && b.size(1) > 1 && b.stride(0) == 1 && b.stride(1) == b.size(0);
  if (!transposed) return (b.dim() == 2 && a.dim() > 2) ? fold_batch_weight_grad(a, g) : k::matmul(mT(a), g);
  Tensor a2 = k::contiguous(a), g2 = k::contiguous(g);
  const int64_t kk = b.size(0), m = b.size(1), rows = a.numel() / kk;
  Tensor gt = g2.as_strided(Dims{m, rows}, Dims{1, m}, 0);                       // (m, B*n), a transposed view
  return mT(k::matmul(gt, a2.as_strided(Dims{rows, kk}, Dims{kk, 1}, 0)));  // (m, k) -> viewed (k, m)
}

// x rounded to bf16 in x's own memory order. The transposed view of a contiguous matrix (a
// Linear's transpose(weight), a tied LM head) is converted as the matrix it views and transposed
// back: the conversion streams through memory instead of gathering with a stride, and oneDNN
// reads the transposed bf16 operand in place. Anything else converts to a contiguous tensor.
Tensor to_bf16(const Tensor& x) {
  if (x.dim() >= 2 && !x.is_contiguous() && mT(x).is_contiguous()) return mT(k::to_dtype(mT(x), kBFloat16));
  return k::to_dtype(x, kBFloat16);
}

// matmul inside an autocast(bf16) scope (autograd/autocast.hpp): the float32 operands rounded
// to bf16, products accumulated in float32. Backward keeps the bf16 operands and rounds the
// float32 gradient to bf16, as torch.autocast's recorded casts do; the gradients are float32,
// a transposed weight's in its own layout as in float32 (weight_grad).
Tensor matmul_autocast(const Tensor& a, const Tensor& b) {
  Tensor a16 = to_bf16(a), b16 = to_bf16(b);  // (..., n, k), (..., k, m)
  return record("matmul_bf16", k::matmul(a16, b16), {a, b},
                [a16, b16](const Tensor& grad, const Tensor&, const Node& n) {
                  Tensor g16 = k::to_dtype(grad, kBFloat16);  // (..., n, m)
                  Tensor ga, gb;
                  if (n.needs_grad(0)) ga = k::matmul(g16, mT(b16));  // (..., n, m) @ (..., m, k)
                  if (n.needs_grad(1)) gb = weight_grad(a16, g16, b16);
                  return Grads{ga, gb};
                });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0)
    fail<ShapeError>("matmul: both operands need at least 1 dim, got {} and {}", to_string(a.shape()), to_string(b.shape()));
  if (a.dim() == 1 && b.dim() == 1) return reshape(matmul(unsqueeze(a, 0), unsqueeze(b, 1)), Dims{});  // dot
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), -2);  // (k) -> (1, k)
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);  // (k) -> (k, 1)
  if (AutocastMode::is_enabled() && a.dtype() == kFloat32 && b.dtype() == kFloat32) return matmul_autocast(a, b);
  return record("matmul", k::matmul(a, b), {a, b}, [a, b](const Tensor& grad, const Tensor&, const Node& n) {
    Tensor ga, gb;
    if (n.needs_grad(0)) ga = k::matmul(grad, mT(b));  // (..., n, m) @ (..., m, k)
    if (n.needs_grad(1)) gb = weight_grad(a, grad, b);
    return Grads{ga, gb};
  });
}

// ============================ structure and indexing ============================

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = k::cat(xs, dim);
  const int d = wrap_dim(dim, xs[0].dim(), "cat");
  return record("cat", out, xs, [d](const Tensor& grad, const Tensor&, const Node& n) {
    Grads grads;
    int64_t at = 0;
    for (size_t i = 0; i < n.shapes.size(); ++i) {
      const int64_t len = n.shapes[i][d];
      grads.push_back(n.needs_grad(i) ? narrow(grad, d, at, len) : Tensor());
      at += len;
    }
    return grads;
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return record("gather", k::gather(x, dim, index), {x},
                [dim, index](const Tensor& grad, const Tensor&, const Node& n) {
                  return Grads{k::scatter_add(zeros_of(n.shapes[0], grad.dtype()), dim, index, k::contiguous(grad))};
                });
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return record("scatter_add", k::scatter_add(self, dim, index, src), {self, src},
                [dim, index](const Tensor& grad, const Tensor&, const Node& n) {
                  return Grads{grad, n.needs_grad(1) ? k::gather(grad, dim, index) : Tensor()};
                });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return record("index_select", k::index_select(x, dim, index), {x},
                [dim, index](const Tensor& grad, const Tensor&, const Node& n) {
                  Tensor z = zeros_of(n.shapes[0], grad.dtype());
                  k::index_add_(z, dim, index, k::contiguous(grad));
                  return Grads{z};
                });
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  return record("cumsum", k::cumsum(x, dim), {x},
                [dim](const Tensor& grad, const Tensor&, const Node&) { return Grads{k::cumsum(grad, dim, true)}; });
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return record("tril", k::tril(x, diagonal, false), {x}, [diagonal](const Tensor& grad, const Tensor&, const Node&) {
    return Grads{k::tril(grad, diagonal, false)};
  });
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return record("triu", k::tril(x, diagonal, true), {x}, [diagonal](const Tensor& grad, const Tensor&, const Node&) {
    return Grads{k::tril(grad, diagonal, true)};
  });
}

}  // namespace attnlab

// ============================ fused cross-entropy (declared in nn/loss.hpp) ============================
// One primitive for log-softmax + NLL + label smoothing + reduction over logits (R, C) and int64
// targets (R) (kernels/loss.cpp). Backward keeps the logits and the per-row log-sum-exp, never
// the (R, C) probabilities. reduction "none" gives (R) (0 on ignored rows); "sum" a scalar;
// "mean" the sum divided by the number of non-ignored rows (NaN when there are none, as in
// PyTorch). Tested against nn::cross_entropy_reference (tests/nn/test_loss.cpp).
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
  return record(
      "cross_entropy", result, {logits},
      [logits, targets, lse = lse, scale, ignore_index, label_smoothing](const Tensor& grad, const Tensor&, const Node&) {
        return Grads{k::cross_entropy_rows_backward(grad, scale, logits, targets, lse, ignore_index, label_smoothing)};
      });
}

}  // namespace attnlab

// ============================ fused training-step ops (declared in autograd/ops.hpp) ============================
// Layer norm (optionally of a residual sum) and bias + GELU as single primitives over rows
// (kernels/fused.cpp), for the transformer's training step. Their backward formulas compute the
// bias and weight gradients themselves, already reduced to (D): summing over the rows in the
// same pass that writes dx saves reading the (R, D) gradient again (the engine's sum_to is then
// a no-op). Tested against the composed forms (tests/autograd/test_fused_training.cpp).
namespace attnlab {

namespace {

// The layer-norm node of s (the normalised input, with history): backward recomputes the
// normalised values from s, the saved per-row mean and rstd, and the weight.
Tensor record_layer_norm(const Tensor& s, const Tensor& weight, const Tensor& bias, const k::LayerNormOut& out) {
  return record("layer_norm", out.y, {s, weight, bias},
                [s = s.detach(), weight = weight.defined() ? weight.detach() : Tensor(), mean = out.mean,
                 rstd = out.rstd](const Tensor& grad, const Tensor&, const Node& n) {
                  k::LayerNormGrads r = k::layer_norm_backward(grad, s, mean, rstd, weight, n.needs_grad(0),
                                                               n.needs_grad(1), n.needs_grad(2));
                  return Grads{r.dx, r.dweight, r.dbias};
                });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (ConservativeMode::is_enabled()) return layer_norm_reference(x, weight, bias, eps);
  return record_layer_norm(x, weight, bias, k::layer_norm(x, {}, weight, bias, eps));
}

AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps) {
  if (!residual.defined()) fail<ValueError>("add_layer_norm: residual is undefined (use layer_norm)");
  if (ConservativeMode::is_enabled()) {
    Tensor s = add(x, residual);
    return {s, layer_norm_reference(s, weight, bias, eps)};
  }
  k::LayerNormOut out = k::layer_norm(x, residual, weight, bias, eps);
  // Two nodes from one pass: the sum (whose gradient, identity to both inputs, the engine
  // reduces to the residual's shape) and the norm of the sum.
  Tensor s = record("add", out.sum, {x, residual},
                    [](const Tensor& grad, const Tensor&, const Node&) { return Grads{grad, grad}; });
  return {s, record_layer_norm(s, weight, bias, out)};
}

Tensor bias_gelu(const Tensor& x, const Tensor& bias, const std::string& approximate) {
  if (approximate != "none" && approximate != "tanh")
    fail<ValueError>("bias_gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  if (!bias.defined()) fail<ValueError>("bias_gelu: bias is undefined (use gelu)");
  const bool tanh_form = approximate == "tanh";
  if (ConservativeMode::is_enabled()) return gelu(add(x, bias), approximate);  // gelu's LRP rule
  return record("bias_gelu", k::bias_gelu(x, bias, tanh_form), {x, bias},
                [x = x.detach(), bias = bias.detach(), tanh_form](const Tensor& grad, const Tensor&, const Node& n) {
                  auto [dx, dbias] = k::bias_gelu_backward(grad, x, bias, tanh_form, n.needs_grad(1));
                  return Grads{dx, dbias};
                });
}

}  // namespace attnlab

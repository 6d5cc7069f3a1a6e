/// @file
/// The CPU kernels: every computation on tensor data, with no knowledge of autograd. The
/// differentiable ops in autograd/ call these for their forward passes and for their backward
/// formulas. Every kernel accepts strided (non-contiguous, broadcast) inputs and returns a new
/// contiguous tensor unless its name ends in `_` (in place).
/// @ingroup tensor
#pragma once
#include <utility>
#include <vector>

#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

// ---- elementwise ----
/// The elementwise unary kernels.
enum class Unary {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Sign, Tanh, Sigmoid, Relu, Sin, Cos, Square, Reciprocal,
  GeluErf, GeluTanh,          ///< GELU, exact (erf) and tanh-approximate
  GeluErfGrad, GeluTanhGrad,  ///< their derivatives d gelu(x)/dx
  Elu, EluGrad,               ///< p0 = alpha
  Softplus, SoftplusGrad,     ///< p0 = beta, p1 = threshold
  AddScalar, MulScalar, PowScalar, RPowScalar,  ///< x + p0, x * p0, x ^ p0, p0 ^ x
  Clamp, ClampGrad,           ///< to [p0, p1]; ClampGrad is 1 inside, 0 outside
  Step,                       ///< 1 where x > 0, else 0
};
/// The parameters of a Unary op (see each op's comment).
struct UnaryParams {
  double p0 = 0;  ///< the first parameter
  double p1 = 0;  ///< the second parameter
};
Tensor unary(Unary op, const Tensor& x, UnaryParams p = {});  ///< op applied elementwise, a new tensor
void unary_(Unary op, const Tensor& x, UnaryParams p = {});   ///< op applied elementwise, in place

/// The elementwise binary kernels (broadcasting).
enum class Binary {
  Add, Sub, Mul, Div, Pow, Maximum, Minimum,  ///< floating or int64 -> same dtype
  Eq, Ne, Lt, Le, Gt, Ge,                     ///< -> bool
  LogicalAnd, LogicalOr,                      ///< bool -> bool
};
/// NumPy broadcasting; both inputs must have the same dtype.
Tensor binary(Binary op, const Tensor& a, const Tensor& b, const char* name);
/// a = a (op) b, with b broadcast to a's shape.
void binary_(Binary op, const Tensor& a, const Tensor& b, const char* name);
/// a += alpha * b (b broadcast to a).
void add_scaled_(const Tensor& a, const Tensor& b, double alpha);
Tensor logical_not(const Tensor& x);  ///< !x of a bool tensor
/// cond ? a : b, broadcasting all three; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- copies and conversions ----
/// dst <- src, src broadcast to dst's shape, converting dtype.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);  ///< every element of dst set to value
Tensor contiguous(const Tensor& x);  ///< x itself when already contiguous
Tensor clone(const Tensor& x);  ///< a contiguous copy
Tensor to_dtype(const Tensor& x, DType dtype);  ///< x itself when already that dtype

// ---- reductions ----
/// Sum over `dims` (each wrapped, no repeats; empty = all dims).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
/// Reduces a broadcast gradient back to `shape` (sums the dims that broadcasting expanded).
Tensor sum_to(const Tensor& x, const Dims& shape);
/// Max or min along one dim: (values, int64 indices); ties pick the first index.
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max = true);

// ---- softmax ----
/// Softmax (or log-softmax) along `dim`. `mask` (bool, broadcastable to x; true = keep) may be
/// undefined. Fully masked rows give zeros (softmax) or -inf (log_softmax).
Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask, bool log);
/// dL/dx from dL/dy and y = softmax(x) (or log_softmax when `log`).
Tensor softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim, bool log);

// ---- matrix products (OpenBLAS; bfloat16 on oneDNN when built with it) ----
/// a (..., n, k) @ b (..., k, m) -> (..., n, m), batch dims broadcast. Both at least 2-d.
/// float32 or float64 operands give a result of their dtype; bfloat16 operands (both) give a
/// float32 result accumulated in float32 (matmul_bf16).
Tensor matmul(const Tensor& a, const Tensor& b);
/// The bfloat16 product: oneDNN's matmul primitive when attnlab is built with oneDNN, else its
/// naive twin, the float32 product of the operands converted exactly to float32. The two differ
/// only in float32 summation order.
Tensor matmul_bf16(const Tensor& a, const Tensor& b);

// ---- indexing and structure ----
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);  ///< x at the int64 `index` along dim
/// A copy of `self` with src added at `index` along dim (index and src have the same shape).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  ///< the entries at the 1-d int64 `index` along dim
/// out.index_select(dim, index) += src, in place (duplicate indices accumulate).
void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);  ///< xs joined along dim
Tensor cumsum(const Tensor& x, int64_t dim, bool reverse = false);  ///< the running sum along dim (from the end with reverse)
/// Sorted along dim: (values, int64 indices). Stable.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted);  ///< the k largest (or smallest) along dim: (values, int64 indices)
/// Keeps elements with col - row <= k (tril) or >= k (triu) in the last two dims; others 0.
Tensor tril(const Tensor& x, int64_t k, bool upper);

// ---- creation ----
Tensor arange(double start, double end, double step, DType dtype);  ///< [start, end) in steps of `step`
Tensor eye(int64_t n, int64_t m, DType dtype);  ///< (n, m) with ones on the diagonal
/// The distributions random_ draws from.
enum class Dist { Uniform, Normal, Bernoulli, Randint };
/// Fills x from gen: uniform [p0, p1), normal(mean p0, std p1), bernoulli(p0), randint [p0, p1).
void random_(const Tensor& x, Generator& gen, Dist dist, double p0, double p1);

// ---- losses (kernels/loss.cpp) ----
/// Fused cross-entropy of each row of logits (R, C) against int64 targets (R), with label
/// smoothing eps: loss_r = (1 - eps) * nll_r + eps * mean_c(-log p_rc), 0 where the target is
/// ignore_index. Returns (loss (R), log-sum-exp (R)); a target outside [0, C) other than
/// ignore_index is an IndexError naming it.
std::pair<Tensor, Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                             double smoothing);
/// dL/dlogits (R, C) = (softmax(x_r) - q_r) * grad_r * scale, q_r = (1 - eps) onehot(t_r) + eps / C,
/// zero rows where t_r is ignore_index. `grad` has R elements or 1 (shared by every row).
Tensor cross_entropy_rows_backward(const Tensor& grad, double scale, const Tensor& logits, const Tensor& targets,
                                   const Tensor& lse, int64_t ignore_index, double smoothing);

// ---- fused training-step passes (kernels/fused.cpp) ----
/// What layer_norm returns.
struct LayerNormOut {
  Tensor y;     ///< (..., D)
  Tensor sum;   ///< (..., D), x + residual; undefined without a residual
  Tensor mean;  ///< (...)
  Tensor rstd;  ///< (...)
};
/// Layer norm over the last dim of x (..., D), one pass over the rows:
///   y = (s - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps) (biased variance),
/// with s = x, or s = x + residual when `residual` is defined (broadcastable to x; the sum is
/// returned too). weight and bias are (D) or undefined. mean and rstd, per row, have x's shape
/// without its last dim; backward recomputes the normalised values from them.
LayerNormOut layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                        double eps);
/// What layer_norm_backward returns: each gradient when asked for, else undefined.
struct LayerNormGrads {
  Tensor dx;       ///< ds, the gradient of s (s's shape)
  Tensor dweight;  ///< (D)
  Tensor dbias;    ///< (D)
};
/// From grad = dL/dy (broadcastable to s): with xhat = (s - mean) rstd and gy = grad * weight,
///   ds = rstd (gy - mean_D(gy) - xhat mean_D(gy xhat)),  dweight = sum_rows(grad xhat),
///   dbias = sum_rows(grad);
/// each only when asked (else undefined). The row sums are the same for any thread count.
LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_dx, bool need_dweight, bool need_dbias);
/// gelu(x + bias) with bias (D) added along the last dim of x (..., D), in one pass; the exact
/// (erf) form, or the tanh form when `tanh_form`.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form);
/// (dx, dbias) from grad = dL/dy: dx = grad * gelu'(x + bias) (x's shape), dbias = sum_rows(dx)
/// (D) when need_dbias (else undefined), the same for any thread count.
std::pair<Tensor, Tensor> bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, bool tanh_form,
                                             bool need_dbias);

}  // namespace attnlab::kernels
/// @}

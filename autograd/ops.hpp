/// @file
/// The differentiable ops: what users call. Each records its backward formula when an input
/// requires a gradient (see derivatives.cpp for the primitives and their formulas, and
/// composed.cpp for the ops built from them).
///
/// Conventions, as in PyTorch: dims may be negative; binary ops broadcast like NumPy; both
/// operands of a binary op have the same dtype (convert with to()).
/// @ingroup autograd
#pragma once
#include <string>
#include <vector>

#include "autograd/node.hpp"
#include "tensor/creation.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup autograd
/// @{
namespace attnlab {

// ---- views and copies ----
Tensor reshape(const Tensor& x, const Dims& shape);  ///< one size may be -1; copies only if needed
Tensor view(const Tensor& x, const Dims& shape);     ///< like reshape, but never copies (error instead)
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor permute(const Tensor& x, const Dims& order);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Dims& shape);  ///< -1 keeps a size
Tensor broadcast_to(const Tensor& x, const Dims& shape);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);

// ---- elementwise ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  ///< no gradient
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// approximate: "none" (erf form, the default) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& x, double min, double max);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
/// cond ? a : b; cond is bool and gets no gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
/// x with `value` wherever mask is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

/// Comparisons and logic give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

// ---- reductions ----
struct ValuesIndices {
  Tensor values;
  Tensor indices;  ///< int64
};
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
/// Variance with Bessel's correction by default (correction = 1), like torch.var.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

/// Softmax along dim. `mask` (bool, broadcastable to x, true = keep) is optional; a row with
/// nothing allowed gives zeros (softmax) or -inf (log_softmax), never NaN.
Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask = {});
Tensor log_softmax(const Tensor& x, int64_t dim, const Tensor& mask = {});
/// The naive twins of the fused softmax and log_softmax, composed from primitives:
/// z - logsumexp(z) and exp of it, z = masked_fill(x, !mask, -inf). Equal to the fused ops on
/// every row with an allowed entry; a row with none gives NaN here.
Tensor softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask = {});
Tensor log_softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask = {});

// ---- products ----
/// torch.matmul semantics: 1-d operands are promoted and the added dim removed; batch dims
/// broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
/// Einstein summation, e.g. einsum("bhnd,bhmd->bhnm", {q, k}); lowered to permute, reshape and
/// matmul. Supports "->" with an explicit output and the implicit form, and "..." (ellipsis).
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

// ---- fused training-step ops (hand-written backward; kernels in tensor/kernels/fused.cpp) ----
/// Layer norm over the last dim of x (..., D): (x - mean) / sqrt(var + eps) * weight + bias, with
/// the biased variance, like F.layer_norm(x, (D,), weight, bias, eps). weight and bias are (D)
/// or undefined (left out). One pass per row forward and backward; layer_norm_reference is its
/// readable twin, built from mean, var and rsqrt, and what runs under ConservativeMode (LRP's
/// LN-rule needs 1/std detached).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
/// The residual add and the layer norm after it, in one pass: sum = x + residual (residual
/// broadcast to x) and normed = layer_norm(sum, weight, bias, eps), both differentiable.
struct AddLayerNorm {
  Tensor sum;     ///< x + residual
  Tensor normed;  ///< layer_norm(sum)
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps = 1e-5);
/// gelu(x + bias) with bias (D) along the last dim of x (..., D), one pass forward and one
/// backward (dx and dbias together). approximate: "none" or "tanh", as for gelu.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, const std::string& approximate = "none");

// ---- losses ----
/// Fused log-softmax + NLL (with label smoothing) over rows: logits (R, C), int64 targets (R).
/// nn::cross_entropy (nn/loss.hpp) is the user-facing form; kernels in tensor/kernels/loss.cpp.
Tensor cross_entropy_fused(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing,
                           const std::string& reduction);

// ---- structure and indexing ----
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// Rows of `weight` (V, D) picked by int64 `indices` of any shape -> (*indices.shape, D).
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor cumsum(const Tensor& x, int64_t dim);
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- in place (no history; refused on tensors that require grad while grad mode is on) ----
Tensor& add_(Tensor& x, const Tensor& other, double alpha = 1.0);
Tensor& mul_(Tensor& x, double value);
Tensor& copy_(Tensor& x, const Tensor& src);
Tensor& fill_(Tensor& x, double value);
Tensor& zero_(Tensor& x);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
inline Tensor operator/(double a, const Tensor& b) { return mul(reciprocal(b), a); }

}  // namespace attnlab
/// @}

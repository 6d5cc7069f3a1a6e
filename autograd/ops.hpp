/// @file
/// The differentiable ops: what users call. Each records its backward formula when an input
/// requires a gradient (see derivatives.cpp for the primitives and their formulas, and
/// composed.cpp for the ops built from them).
///
/// Conventions, as in PyTorch: dims may be negative; binary ops broadcast like NumPy; both
/// operands of a binary op have the same dtype (convert with to()).
///
/// Errors: ShapeError when shapes do not broadcast or do not fit the op (naming the op and both
/// shapes), DTypeError for a dtype the op does not take, IndexError for a dim or index out of
/// range, AutogradError for an in-place op on a tensor that requires a gradient while grad mode
/// is on (tensor/error.hpp).
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
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);  ///< dims start_dim..end_dim merged into one (a view when possible)
Tensor permute(const Tensor& x, const Dims& order);  ///< dims reordered: result dim i is x's dim order[i] (a view)
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);  ///< dims dim0 and dim1 swapped (a view)
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  ///< `length` entries of dim from `start` (a view); IndexError when out of range
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);  ///< entries start, start + step, ... < end of dim, like x[start:end:step] (a view)
Tensor select(const Tensor& x, int64_t dim, int64_t index);  ///< entry `index` of dim, that dim removed (a view)
Tensor expand(const Tensor& x, const Dims& shape);  ///< -1 keeps a size
Tensor broadcast_to(const Tensor& x, const Dims& shape);  ///< x expanded to `shape` by NumPy broadcasting (a view); ShapeError when it cannot
Tensor squeeze(const Tensor& x);  ///< every size-1 dim removed
Tensor squeeze(const Tensor& x, int64_t dim);  ///< dim removed when its size is 1 (otherwise x)
Tensor unsqueeze(const Tensor& x, int64_t dim);  ///< a size-1 dim inserted at dim
Tensor contiguous(const Tensor& x);  ///< x itself when row-major contiguous, else a contiguous copy
Tensor clone(const Tensor& x);  ///< a contiguous copy with its own storage (differentiable)
Tensor to(const Tensor& x, DType dtype);  ///< x converted to dtype (x itself when it has it); the gradient converts back

// ---- elementwise ----
Tensor add(const Tensor& a, const Tensor& b);  ///< a + b, broadcast
Tensor sub(const Tensor& a, const Tensor& b);  ///< a - b, broadcast
Tensor mul(const Tensor& a, const Tensor& b);  ///< a * b, broadcast
Tensor div(const Tensor& a, const Tensor& b);  ///< a / b, broadcast
Tensor pow(const Tensor& a, const Tensor& b);  ///< a ^ b elementwise, broadcast
Tensor add(const Tensor& a, double b);  ///< a + b for a scalar b
Tensor mul(const Tensor& a, double b);  ///< a * b for a scalar b
Tensor pow(const Tensor& a, double exponent);  ///< a ^ exponent
Tensor pow(double base, const Tensor& exponent);  ///< base ^ exponent
Tensor maximum(const Tensor& a, const Tensor& b);  ///< elementwise max of a and b, broadcast
Tensor minimum(const Tensor& a, const Tensor& b);  ///< elementwise min of a and b, broadcast
Tensor neg(const Tensor& x);  ///< -x
Tensor exp(const Tensor& x);  ///< e^x
Tensor log(const Tensor& x);  ///< natural logarithm
Tensor sqrt(const Tensor& x);  ///< square root
Tensor rsqrt(const Tensor& x);  ///< 1 / sqrt(x)
Tensor abs(const Tensor& x);  ///< |x|
Tensor sign(const Tensor& x);  ///< no gradient
Tensor square(const Tensor& x);  ///< x * x
Tensor reciprocal(const Tensor& x);  ///< 1 / x
Tensor sin(const Tensor& x);  ///< sine
Tensor cos(const Tensor& x);  ///< cosine
Tensor tanh(const Tensor& x);  ///< hyperbolic tangent
Tensor sigmoid(const Tensor& x);  ///< 1 / (1 + e^-x)
Tensor relu(const Tensor& x);  ///< max(x, 0)
/// approximate: "none" (erf form, the default) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor elu(const Tensor& x, double alpha = 1.0);  ///< x for x > 0, alpha * (e^x - 1) otherwise
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);  ///< log(1 + e^(beta x)) / beta; x where beta x > threshold
Tensor clamp(const Tensor& x, double min, double max);  ///< x limited to [min, max]
Tensor clamp_min(const Tensor& x, double min);  ///< max(x, min)
Tensor clamp_max(const Tensor& x, double max);  ///< min(x, max)
/// cond ? a : b; cond is bool and gets no gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);  ///< cond ? a : b for a scalar b
/// x with `value` wherever mask is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

/// Comparisons and logic give bool tensors and no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);  ///< a != b (bool)
Tensor lt(const Tensor& a, const Tensor& b);  ///< a < b (bool)
Tensor le(const Tensor& a, const Tensor& b);  ///< a <= b (bool)
Tensor gt(const Tensor& a, const Tensor& b);  ///< a > b (bool)
Tensor ge(const Tensor& a, const Tensor& b);  ///< a >= b (bool)
Tensor eq(const Tensor& a, double b);  ///< a == b for a scalar b (bool)
Tensor ne(const Tensor& a, double b);  ///< a != b for a scalar b (bool)
Tensor lt(const Tensor& a, double b);  ///< a < b for a scalar b (bool)
Tensor le(const Tensor& a, double b);  ///< a <= b for a scalar b (bool)
Tensor gt(const Tensor& a, double b);  ///< a > b for a scalar b (bool)
Tensor ge(const Tensor& a, double b);  ///< a >= b for a scalar b (bool)
Tensor logical_and(const Tensor& a, const Tensor& b);  ///< a && b of bool tensors
Tensor logical_or(const Tensor& a, const Tensor& b);  ///< a || b of bool tensors
Tensor logical_not(const Tensor& x);  ///< !x of a bool tensor

// ---- reductions ----
/// The values and int64 indices of a reduction along one dim (max, min, topk, sort).
struct ValuesIndices {
  Tensor values;  ///< the values
  Tensor indices;  ///< int64
};
Tensor sum(const Tensor& x);  ///< the sum of every element (a 0-d tensor)
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  ///< the sum over dims (kept as size 1 with keepdim)
Tensor mean(const Tensor& x);  ///< the mean of every element (a 0-d tensor); DTypeError for a non-floating x
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  ///< the mean over dims (kept as size 1 with keepdim)
/// Variance with Bessel's correction by default (correction = 1), like torch.var.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false);
Tensor max(const Tensor& x);  ///< the largest element (a 0-d tensor)
Tensor min(const Tensor& x);  ///< the smallest element (a 0-d tensor)
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);  ///< the largest entry along dim and its index
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);  ///< the smallest entry along dim and its index
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);  ///< the index (int64) of the largest entry along dim
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);  ///< the index (int64) of the smallest entry along dim
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  ///< the largest entry over dims (tied maxima share the gradient evenly)
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  ///< log(sum(exp(x))) over dims, computed stably

/// Softmax along dim. `mask` (bool, broadcastable to x, true = keep) is optional; a row with
/// nothing allowed gives zeros (softmax) or -inf (log_softmax), never NaN.
Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask = {});
Tensor log_softmax(const Tensor& x, int64_t dim, const Tensor& mask = {});  ///< log of softmax along dim, with the same optional mask
/// The naive twins of the fused softmax and log_softmax, composed from primitives:
/// z - logsumexp(z) and exp of it, z = masked_fill(x, !mask, -inf). Equal to the fused ops on
/// every row with an allowed entry; a row with none gives NaN here.
Tensor softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask = {});
Tensor log_softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask = {});  ///< the naive twin of log_softmax

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
Tensor layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);  ///< the composed twin of layer_norm
/// The residual add and the layer norm after it, in one pass: sum = x + residual (residual
/// broadcast to x) and normed = layer_norm(sum, weight, bias, eps), both differentiable.
struct AddLayerNorm {
  Tensor sum;     ///< x + residual
  Tensor normed;  ///< layer_norm(sum)
};
/// The fused residual add and layer norm described above.
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
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);  ///< xs joined along an existing dim; ShapeError when the other sizes differ
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);  ///< xs (same shape) joined along a new dim
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);  ///< pieces of split_size along dim (the last may be smaller), as views
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);  ///< pieces of the given sizes along dim, as views
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);  ///< `chunks` pieces of (nearly) equal size along dim, as views
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);  ///< x's entries at the int64 `index` along dim: out[i][j] = x[i][index[i][j]] for dim 1
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);  ///< self with src added at the int64 `index` along dim (the inverse of gather)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);  ///< the entries of x at the 1-d int64 `index` along dim
/// Rows of `weight` (V, D) picked by int64 `indices` of any shape -> (*indices.shape, D).
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor cumsum(const Tensor& x, int64_t dim);  ///< the running sum along dim
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);  ///< the k largest (or smallest) entries along dim and their indices
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false);  ///< x sorted along dim, with each entry's index in x
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);  ///< the indices that sort x along dim (int64, no gradient)
Tensor tril(const Tensor& x, int64_t diagonal = 0);  ///< the lower triangle of the last two dims (entries above the diagonal zeroed)
Tensor triu(const Tensor& x, int64_t diagonal = 0);  ///< the upper triangle of the last two dims (entries below the diagonal zeroed)

// ---- in place (no history; refused on tensors that require grad while grad mode is on) ----
Tensor& add_(Tensor& x, const Tensor& other, double alpha = 1.0);  ///< x += alpha * other, in place
Tensor& mul_(Tensor& x, double value);  ///< x *= value, in place
Tensor& copy_(Tensor& x, const Tensor& src);  ///< x's elements set from src (broadcast to x, converted to x's dtype), in place
Tensor& fill_(Tensor& x, double value);  ///< every element of x set to value, in place
Tensor& zero_(Tensor& x);  ///< every element of x set to 0, in place

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }  ///< add(a, b)
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }  ///< sub(a, b)
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }  ///< mul(a, b)
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }  ///< div(a, b)
inline Tensor operator-(const Tensor& x) { return neg(x); }  ///< neg(x)
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }  ///< add(a, b)
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }  ///< add(b, a)
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }  ///< a - b
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }  ///< a - b
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }  ///< mul(a, b)
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }  ///< mul(b, a)
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }  ///< a * (1 / b)
inline Tensor operator/(double a, const Tensor& b) { return mul(reciprocal(b), a); }  ///< a * reciprocal(b)

}  // namespace attnlab
/// @}

// Ops composed from the primitives in derivatives.cpp. None has a backward formula of its own:
// each gets its gradient from the primitives it is made of.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/grad_mode.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {

namespace k = kernels;

Tensor squeeze(const Tensor& x) {
  Dims sh;
  for (int64_t s : x.shape())
    if (s != 1) sh.push_back(s);
  return reshape(x, sh);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  int d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Dims sh = x.shape();
  sh.erase(d);
  return reshape(x, sh);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Dims sh = x.shape();
  sh.insert(d, 1);
  return reshape(x, sh);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  if (x.dim() == 0) return x;
  Dims order;
  for (int i = 0; i < x.dim(); ++i) order.push_back(i);
  std::swap(order[wrap_dim(dim0, x.dim(), "transpose")], order[wrap_dim(dim1, x.dim(), "transpose")]);
  return permute(x, order);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, Dims{1});
  int s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  if (s > e) fail<ValueError>("flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Dims sh;
  for (int i = 0; i < s; ++i) sh.push_back(x.shape()[i]);
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= x.shape()[i];
  sh.push_back(n);
  for (int i = e + 1; i < x.dim(); ++i) sh.push_back(x.shape()[i]);
  return reshape(x, sh);
}

Tensor broadcast_to(const Tensor& x, const Dims& shape) { return expand(x, shape); }

Tensor clamp_min(const Tensor& x, double lo) { return clamp(x, lo, std::numeric_limits<double>::infinity()); }
Tensor clamp_max(const Tensor& x, double hi) { return clamp(x, -std::numeric_limits<double>::infinity(), hi); }

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

namespace {
int64_t reduced_count(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  if (dims.empty()) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dim() ? x.shape()[wrap_dim(d, x.dim(), op)] : 1;
  return n;
}
}  // namespace

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (!x.is_floating_point()) fail<DTypeError>("mean: expected a floating tensor, got {}", dtype_name(x.dtype()));
  return sum(x, dims, keepdim) * (1.0 / double(reduced_count(x, dims, "mean")));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  Tensor centered = x - mean(x, dims, true);
  const double n = double(reduced_count(x, dims, "var")) - double(correction);
  return sum(square(centered), dims, keepdim) * (1.0 / std::max(n, 0.0));
}

// The readable twin of the fused layer_norm (derivatives.cpp), and the form LRP needs: under
// ConservativeMode 1/std is a constant, so the layer is linear in x (grad_mode.hpp).
Tensor layer_norm_reference(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor mu = mean(x, {-1}, true);                     // (..., 1)
  Tensor var_ = var(x, {-1}, /*correction=*/0, true);  // (..., 1)
  Tensor inv_std = rsqrt(var_ + eps);                  // (..., 1)
  if (ConservativeMode::is_enabled()) inv_std = inv_std.detach();
  Tensor y = (x - mu) * inv_std;         // (..., D)
  if (weight.defined()) y = y * weight;  // (..., D) * (D)
  if (bias.defined()) y = y + bias;      // (..., D) + (D)
  return y;
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  auto [values, idx] = k::max_dim(x, dim, true, true);
  Tensor v = x.dim() ? gather(x, dim, idx) : x;  // the gradient flows to the selected elements
  if (!keepdim && x.dim()) {
    v = squeeze(v, dim);
    idx = k::contiguous(idx).as_strided(v.shape(), contiguous_strides(v.shape()), 0);
  }
  return {v, idx};
}

ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  auto [values, idx] = k::max_dim(x, dim, true, false);
  Tensor v = x.dim() ? gather(x, dim, idx) : x;
  if (!keepdim && x.dim()) {
    v = squeeze(v, dim);
    idx = k::contiguous(idx).as_strided(v.shape(), contiguous_strides(v.shape()), 0);
  }
  return {v, idx};
}

// Full reductions split the gradient evenly between tied extremes, like PyTorch (see amax).
Tensor max(const Tensor& x) { return amax(x, {}); }
Tensor min(const Tensor& x) { return neg(amax(neg(x), {})); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) { return k::max_dim(x, dim, keepdim, true).second; }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return k::max_dim(x, dim, keepdim, false).second; }

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> ds = dims;
  if (ds.empty())
    for (int d = 0; d < x.dim(); ++d) ds.push_back(d);
  Tensor m = x.detach();
  for (int64_t d : ds) m = k::max_dim(m, wrap_dim(d, x.dim(), "amax"), true, true).first;
  if (x.requires_grad() && GradMode::is_enabled()) {
    // Tied maxima share the gradient evenly, like PyTorch's amax: m + sum(x - m over the ties)
    // / count is exactly m, with gradient 1/count at each tie. Infinite maxima get none.
    Tensor tied = logical_and(eq(x, m), ne(abs(m), std::numeric_limits<double>::infinity()));  // x's shape
    Tensor count = clamp_min(sum(to(tied, x.dtype()), ds, true), 1.0);                         // m's shape
    m = m + sum(where(tied, x - m, 0.0), ds, true) / count;
  }
  if (keepdim) return m;
  Dims sh;
  std::vector<bool> drop(x.dim(), false);
  for (int64_t d : ds) drop[wrap_dim(d, x.dim(), "amax")] = true;
  for (int d = 0; d < x.dim(); ++d)
    if (!drop[d]) sh.push_back(x.shape()[d]);
  return reshape(m, sh);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  // log sum exp(x) = m + log sum exp(x - m) with m the (constant) max; rows whose max is
  // infinite use m = 0 so that an all -inf row gives -inf, not NaN.
  Tensor m = amax(x.detach(), dims, true);
  m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
  Tensor out = log(sum(exp(x - m), dims, true)) + m;
  return keepdim ? out : reshape(out, amax(x.detach(), dims, false).shape());
}

Tensor log_softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask) {
  Tensor z = mask.defined() ? masked_fill(x, logical_not(mask), -std::numeric_limits<double>::infinity()) : x;
  return z - logsumexp(z, {dim}, true);
}

Tensor softmax_reference(const Tensor& x, int64_t dim, const Tensor& mask) {
  return exp(log_softmax_reference(x, dim, mask));
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) fail<ValueError>("stack: expected at least one tensor");
  int d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].shape() != xs[0].shape())
      fail<ShapeError>("stack: tensor {} has shape {}, expected {} like tensor 0", i, to_string(xs[i].shape()),
                       to_string(xs[0].shape()));
    parts.push_back(unsqueeze(xs[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  if (split_size <= 0) fail<ValueError>("split: split_size must be positive, got {}", split_size);
  int d = wrap_dim(dim, x.dim(), "split");
  std::vector<Tensor> out;
  for (int64_t at = 0; at < x.shape()[d]; at += split_size)
    out.push_back(narrow(x, d, at, std::min(split_size, x.shape()[d] - at)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  int d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (total != x.shape()[d])
    fail<ShapeError>("split: sizes add up to {} but dim {} has size {}", total, dim, x.shape()[d]);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0) fail<ValueError>("chunk: chunks must be positive, got {}", chunks);
  int d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.shape()[d];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), d);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  if (weight.dim() != 2) fail<ShapeError>("embedding: weight must be 2-d (V, D), got {}", to_string(weight.shape()));
  Dims sh = indices.shape();
  sh.push_back(weight.shape()[1]);
  return reshape(index_select(weight, 0, reshape(indices, Dims{-1})), sh);
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  Tensor idx = k::topk(x, k, dim, largest, sorted).second;
  return {x.dim() ? gather(x, dim, idx) : x, idx};
}

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  Tensor idx = k::sort(x, dim, descending).second;
  return {x.dim() ? gather(x, dim, idx) : x, idx};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return k::sort(x, dim, descending).second; }

}  // namespace attnlab

namespace attnlab {

namespace {
// `a` and the scalar b as tensors of one dtype. When a's dtype cannot hold b (arange(4) < 2.5),
// both go to float64, so that b is not truncated (2 < 2.5 stays true).
std::pair<Tensor, Tensor> compare_operands(const Tensor& a, double b) {
  const bool holds = a.dtype() == kBool    ? (b == 0 || b == 1)
                     : a.dtype() == kInt64 ? (b == std::trunc(b) && std::abs(b) < 9.2e18)
                                           : true;
  if (holds) return {a, scalar_tensor(b, a.dtype())};
  return {to(a, kFloat64), scalar_tensor(b, kFloat64)};
}
}  // namespace

Tensor eq(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return eq(x, s); }
Tensor ne(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return ne(x, s); }
Tensor lt(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return lt(x, s); }
Tensor le(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return le(x, s); }
Tensor gt(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return gt(x, s); }
Tensor ge(const Tensor& a, double b) { auto [x, s] = compare_operands(a, b); return ge(x, s); }

}  // namespace attnlab

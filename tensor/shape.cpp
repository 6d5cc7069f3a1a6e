#include "tensor/shape.hpp"

#include <fmt/format.h>

namespace attnlab {

std::string to_string(const Dims& d) {
  std::string s = "(";
  for (int i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + ")";
}

void fail_bad_shape(const Dims& shape) {
  for (int64_t s : shape)
    if (s < 0) fail<ShapeError>("shape {} has a negative size ({}); sizes must be >= 0", to_string(shape), s);
  fail<ShapeError>("shape {} has more elements than a tensor can index (the product of its sizes must be at most "
                   "2^63-1 = {})",
                   to_string(shape), INT64_MAX);
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t lo = -std::max(ndim, 1), hi = std::max(ndim, 1) - 1;
  if (dim < lo || dim > hi)
    fail<IndexError>("{}: dim {} is out of range for a tensor with {} dimensions (expected {} to {})", op, dim,
                     ndim, lo, hi);
  return static_cast<int>(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      fail<ShapeError>("{}: shapes {} and {} cannot be broadcast: size {} and {} differ at dim {}", op,
                       to_string(a), to_string(b), sa, sb, i - n);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

Dims broadcast_strides(const Dims& shape, const Dims& strides, const Dims& target) {
  Dims out = Dims::filled(target.size(), 0);
  int off = target.size() - shape.size();
  for (int i = 0; i < shape.size(); ++i) out[off + i] = shape[i] == 1 && target[off + i] != 1 ? 0 : strides[i];
  return out;
}

}  // namespace attnlab

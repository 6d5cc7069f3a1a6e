// Copies, fills, where and dtype conversion: elementwise kernels with no arithmetic (map.hpp;
// the unary and binary ops are elementwise.cpp). A copy between float32, bfloat16 and bool takes
// the fast paths; float64 and int64 ones the strided loop (map.hpp, kFastPaths).
#include <algorithm>

#include "tensor/kernels.hpp"
#include "tensor/kernels/map.hpp"

namespace attnlab::kernels {

Tensor logical_not(const Tensor& x) {
  if (x.dtype() != kBool) fail<DTypeError>("logical_not: expected a bool tensor, got {}", dtype_name(x.dtype()));
  Tensor out = Tensor::empty(x.shape(), kBool);
  map1<bool, bool>(out, x, [](bool v) { return !v; });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.dtype() != kBool) fail<DTypeError>("where: the condition must be bool, got {}", dtype_name(cond.dtype()));
  if (a.dtype() != b.dtype())
    fail<DTypeError>("where: dtypes differ: {} and {}", dtype_name(a.dtype()), dtype_name(b.dtype()));
  Dims shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = Tensor::empty(shape, a.dtype());
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    map3<T, bool, T, T>(out, cond, a, b, [](bool c, T x, T y) { return c ? x : y; });
  });
  return out;
}

void copy_(const Tensor& dst, const Tensor& src) {
  Dims shape = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  if (shape != dst.shape())
    fail<ShapeError>("copy_: source of shape {} cannot be broadcast to destination shape {}", to_string(src.shape()),
                     to_string(dst.shape()));
  dispatch_all(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    dispatch_all(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      map1<D, S>(dst, src, [](S v) { return static_cast<D>(v); });
    });
  });
}

void fill_(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    if (dst.is_contiguous()) {
      std::fill_n(static_cast<T*>(dst.raw_data()), dst.numel(), v);
    } else {
      map1<T, T>(dst, dst, [v](T) { return v; });
    }
  });
}

Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

Tensor clone(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  copy_(out, x);
  return out;
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype);
  copy_(out, x);
  return out;
}

}  // namespace attnlab::kernels

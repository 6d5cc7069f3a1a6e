// Softmax and log-softmax along one dim, fused (one read, one write per pass), with an
// optional boolean mask. A row with no allowed entry gives zeros (softmax) or -inf
// (log_softmax), never NaN. The naive twin, exp(x - logsumexp(x)) composed from primitives, is
// softmax_reference (autograd/ops.hpp); tests/autograd/test_fused_vs_composed.cpp compares them.
#include <cmath>
#include <limits>

#include "tensor/kernels.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

// out[j] = exp(x[j] - m), returning the sum of out, in one pass: sixteen lanes so that the loop
// vectorises (a single running sum is a chain of dependent additions the compiler must keep in
// order) and two vectors of additions are in flight. The order of additions depends only on L.
template <class T>
T exp_shift_sum(const T* __restrict x, T m, T* __restrict out, int64_t L) {
  constexpr int kLanes = 16;
  T lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= L; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T e = exp_fast(x[j + l] - m);
      out[j + l] = e;
      lane[l] += e;
    }
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  T s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
  for (; j < L; ++j) {
    out[j] = exp_fast(x[j] - m);
    s += out[j];
  }
  return s;
}

template <class T>
void softmax_row(const T* x, const bool* mask, int64_t mstride, T* out, int64_t L, bool log) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T m = kNegInf;
  if (mask) {
    for (int64_t j = 0; j < L; ++j)
      if (mask[j * mstride] && x[j] > m) m = x[j];
  } else {
    m = max_row(x, L);
  }
  if (m == kNegInf) {  // nothing allowed (or every logit is -inf)
    for (int64_t j = 0; j < L; ++j) out[j] = log ? kNegInf : T(0);
    return;
  }
  T s;
  if (mask) {
    for (int64_t j = 0; j < L; ++j) out[j] = mask[j * mstride] ? exp_fast(x[j] - m) : T(0);
    s = sum_row(out, L);
  } else {
    s = exp_shift_sum(x, m, out, L);  // the row stays in L1 between the passes
  }
  if (log) {
    T shift = m + std::log(s);
    for (int64_t j = 0; j < L; ++j) out[j] = (mask && !mask[j * mstride]) ? kNegInf : x[j] - shift;
  } else {
    T inv = T(1) / s;
    for (int64_t j = 0; j < L; ++j) out[j] *= inv;
  }
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, const Tensor& mask, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  if (x.dim() == 0) return softmax(x.as_strided(Dims{1}, Dims{1}, x.offset()), 0, mask, log).as_strided(Dims{}, Dims{}, 0);
  int d = wrap_dim(dim, x.dim(), name);
  Tensor mview;
  if (mask.defined()) {
    if (mask.dtype() != kBool)
      fail<DTypeError>("{}: the mask must be bool (true = may attend), got {}", name, dtype_name(mask.dtype()));
    Dims b = broadcast_shapes(x.shape(), mask.shape(), name);
    if (b != x.shape())
      fail<ShapeError>("{}: mask of shape {} does not broadcast to the input shape {}", name, to_string(mask.shape()),
                       to_string(x.shape()));
    mview = move_dim_last(mask.as_strided(x.shape(), broadcast_strides(mask.shape(), mask.strides(), x.shape()),
                                          mask.offset()),
                          d);
  }
  Tensor src = contiguous(move_dim_last(x, d));
  Tensor out = Tensor::empty(src.shape(), x.dtype());
  const int64_t L = src.shape().back();
  const int64_t rows = L ? src.numel() / L : 0;
  const int nlead = src.dim() - 1;
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(src.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    const bool* pm = mview.defined() ? static_cast<const bool*>(mview.raw_data()) : nullptr;
    const int64_t mstride = mview.defined() ? mview.strides().back() : 0;
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const bool* mrow = pm ? pm + row_offset(r, mview.shape(), mview.strides(), nlead) : nullptr;
        softmax_row<T>(px + r * L, mrow, mstride, po + r * L, L, log);
      }
    });
  });
  return d == x.dim() - 1 ? out : contiguous(move_last_to(out, d));
}

Tensor softmax_backward(const Tensor& grad, const Tensor& result, int64_t dim, bool log) {
  int d = wrap_dim(dim, result.dim(), "softmax_backward");
  if (result.dim() == 0) {  // a softmax over one element is constant
    Tensor zero = Tensor::empty(Dims{}, result.dtype());
    fill_(zero, 0);
    return zero;
  }
  Tensor g = contiguous(move_dim_last(grad, d)), y = contiguous(move_dim_last(result, d));
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  const int64_t L = y.shape().back();
  const int64_t rows = L ? y.numel() / L : 0;
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pg = static_cast<const T*>(g.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T *gr = pg + r * L, *yr = py + r * L;
        T* o = po + r * L;
        T s = 0;
        if (log) {
          for (int64_t j = 0; j < L; ++j) s += std::isinf(yr[j]) ? T(0) : gr[j];
          for (int64_t j = 0; j < L; ++j) o[j] = std::isinf(yr[j]) ? T(0) : gr[j] - exp_fast(yr[j]) * s;
        } else {
          for (int64_t j = 0; j < L; ++j) s += gr[j] * yr[j];
          for (int64_t j = 0; j < L; ++j) o[j] = yr[j] * (gr[j] - s);
        }
      }
    });
  });
  return d == result.dim() - 1 ? out : contiguous(move_last_to(out, d));
}

}  // namespace attnlab::kernels

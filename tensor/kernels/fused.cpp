// Fused training-step passes over rows (the last dim): layer norm (Ba, Kiros & Hinton 2016),
// optionally of a residual sum x + r, and gelu(x + bias). The composed forms they replace
// (layer_norm_reference in autograd/composed.cpp; gelu(add(x, bias))) read and write the whole
// (R, D) activation once per elementwise step; here each row is read once from memory and the
// per-row work (mean, variance, normalise, affine; or add, GELU) happens while it is in L1.
//
// Precision: the layer-norm statistics are two-pass in the input's dtype, mean first and then
// the sum of squared deviations from it (no E[x^2] - E[x]^2 cancellation), each in 16-32
// independent lane sums combined pairwise; 1/sqrt(var + eps) is taken in double.
//
// Determinism: the column sums of backward (dweight, dbias) are accumulated over fixed blocks
// of kBlockRows rows, each block into its own row of a (blocks, D) buffer, and the blocks are
// then summed in order by kernels::sum. The block boundaries depend only on R, so the result
// is the same for any thread count (threads only decide which blocks run where).
#include <algorithm>
#include <cmath>
#include <optional>

#include "tensor/kernels.hpp"
#include "tensor/kernels/gelu.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

constexpr int64_t kBlockRows = 32;

// x broadcast to `shape` (..., D) as a tensor whose last dim has unit stride, copied only when
// x's last dim is not already unit-stride, so that every row is D adjacent elements.
Tensor unit_rows(const Tensor& x, const Dims& shape) {
  Tensor v = x.shape() == shape ? x : x.as_strided(shape, broadcast_strides(x.shape(), x.strides(), shape), x.offset());
  return v.strides().back() == 1 || shape.back() == 1 ? v : contiguous(v);
}

// Row r of a unit_rows tensor: r * D for packed rows, else from the leading dims' strides.
template <class T>
struct RowPtr {
  explicit RowPtr(const Tensor& t)
      : base(t.data<T>()), shape(t.shape()), strides(t.strides()), nlead(t.dim() - 1), D(t.shape().back()),
        packed(t.is_contiguous()) {}
  const T* operator[](int64_t r) const { return base + (packed ? r * D : row_offset(r, shape, strides, nlead)); }
  const T* base;
  Dims shape, strides;
  int nlead;
  int64_t D;
  bool packed;
};

// Shape of x without its last dim: where the per-row statistics go.
Dims lead_shape(const Dims& shape) {
  Dims out = shape;
  out.erase(out.size() - 1);
  return out;
}

// `what` must be (D) and have x's dtype.
void check_vector(const char* op, const char* what, const Tensor& v, const Tensor& x) {
  if (!v.defined()) return;
  const int64_t D = x.shape().back();
  if (v.dim() != 1 || v.shape()[0] != D)
    fail<ShapeError>("{}: {} must be ({}) for input {}, got {}", op, what, D, to_string(x.shape()),
                     to_string(v.shape()));
  if (v.dtype() != x.dtype())
    fail<DTypeError>("{}: {} is {} but the input is {} (convert with to())", op, what, dtype_name(v.dtype()),
                     dtype_name(x.dtype()));
}

void check_input(const char* op, const Tensor& x) {
  if (x.dim() == 0 || x.shape().back() == 0)
    fail<ShapeError>("{}: expected an input (..., D) with D > 0, got {}", op, to_string(x.shape()));
}

// Sum of (p[j] - m)^2 over j < D, in 16 lanes (a single running sum is a dependency chain the
// compiler may not reorder; independent lanes vectorise).
template <class T>
T sum_sq_dev(const T* p, int64_t D, T m) {
  constexpr int kLanes = 16;
  T lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= D; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T d = p[j + l] - m;
      lane[l] += d * d;
    }
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  T s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
  for (; j < D; ++j) s += (p[j] - m) * (p[j] - m);
  return s;
}

// sum_j gy_j and sum_j gy_j xhat_j with gy = g * w (w null: 1) and xhat = (s - m) * rs, in lanes.
template <class T>
void backward_sums(const T* s, const T* g, const T* w, int64_t D, T m, T rs, T* sum_gy, T* sum_gyx) {
  constexpr int kLanes = 16;
  T a[kLanes] = {}, b[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= D; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T gy = w ? g[j + l] * w[j + l] : g[j + l];
      a[l] += gy;
      b[l] += gy * ((s[j + l] - m) * rs);
    }
  for (int l = 0; l < 8; ++l) a[l] += a[l + 8], b[l] += b[l + 8];
  for (int l = 0; l < 4; ++l) a[l] += a[l + 4], b[l] += b[l + 4];
  T sa = (a[0] + a[2]) + (a[1] + a[3]), sb = (b[0] + b[2]) + (b[1] + b[3]);
  for (; j < D; ++j) {
    const T gy = w ? g[j] * w[j] : g[j];
    sa += gy;
    sb += gy * ((s[j] - m) * rs);
  }
  *sum_gy = sa;
  *sum_gyx = sb;
}

// Runs body(r0, r1, block) over the fixed row blocks of [0, R) in parallel.
template <class F>
void for_row_blocks(int64_t R, int64_t D, F&& body) {
  const int64_t nblocks = (R + kBlockRows - 1) / kBlockRows;
  parallel_for(nblocks, std::max<int64_t>(1, kParallelGrain / (kBlockRows * D)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) body(b * kBlockRows, std::min(R, (b + 1) * kBlockRows), b);
  });
}

}  // namespace

LayerNormOut layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                        double eps) {
  const char* op = residual.defined() ? "add_layer_norm" : "layer_norm";
  check_input(op, x);
  check_vector(op, "weight", weight, x);
  check_vector(op, "bias", bias, x);
  if (!(eps >= 0)) fail<ValueError>("{}: eps must be non-negative, got {}", op, eps);
  if (residual.defined()) {
    if (residual.dtype() != x.dtype())
      fail<DTypeError>("{}: residual is {} but the input is {}", op, dtype_name(residual.dtype()),
                       dtype_name(x.dtype()));
    if (broadcast_shapes(x.shape(), residual.shape(), op) != x.shape())
      fail<ShapeError>("{}: residual {} does not broadcast to the input's shape {}", op,
                       to_string(residual.shape()), to_string(x.shape()));
  }
  const int64_t D = x.shape().back(), R = x.numel() / D;
  LayerNormOut out;
  out.y = Tensor::empty(x.shape(), x.dtype());               // (..., D)
  if (residual.defined()) out.sum = Tensor::empty(x.shape(), x.dtype());  // (..., D)
  out.mean = Tensor::empty(lead_shape(x.shape()), x.dtype());  // (...)
  out.rstd = Tensor::empty(lead_shape(x.shape()), x.dtype());  // (...)
  const Tensor xs = unit_rows(x, x.shape());
  const Tensor rs = residual.defined() ? unit_rows(residual, x.shape()) : Tensor();
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor(), b = bias.defined() ? contiguous(bias) : Tensor();
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const RowPtr<T> X(xs);
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = out.y.data<T>();
    T* ps = out.sum.defined() ? out.sum.data<T>() : nullptr;
    T *pm = out.mean.data<T>(), *pr = out.rstd.data<T>();
    const std::optional<RowPtr<T>> Res = rs.defined() ? std::optional<RowPtr<T>>(RowPtr<T>(rs)) : std::nullopt;
    parallel_for(R, std::max<int64_t>(1, kParallelGrain / D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* src = X[r];  // (D)
        if (ps) {
          const T* xr = src;
          const T* rr = (*Res)[r];  // (D)
          T* sr = ps + r * D;       // (D)
          for (int64_t j = 0; j < D; ++j) sr[j] = xr[j] + rr[j];
          src = sr;
        }
        const T m = sum_row(src, D) / T(D);
        const T rstd = T(1.0 / std::sqrt(double(sum_sq_dev(src, D, m)) / double(D) + eps));
        pm[r] = m;
        pr[r] = rstd;
        T* y = py + r * D;  // (D)
        if (pw && pb) {
          for (int64_t j = 0; j < D; ++j) y[j] = (src[j] - m) * rstd * pw[j] + pb[j];
        } else if (pw) {
          for (int64_t j = 0; j < D; ++j) y[j] = (src[j] - m) * rstd * pw[j];
        } else if (pb) {
          for (int64_t j = 0; j < D; ++j) y[j] = (src[j] - m) * rstd + pb[j];
        } else {
          for (int64_t j = 0; j < D; ++j) y[j] = (src[j] - m) * rstd;
        }
      }
    });
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& grad, const Tensor& s, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool need_dx, bool need_dweight, bool need_dbias) {
  const char* op = "layer_norm_backward";
  check_input(op, s);
  check_vector(op, "weight", weight, s);
  if (grad.dtype() != s.dtype())
    fail<DTypeError>("{}: gradient is {} but the input is {}", op, dtype_name(grad.dtype()), dtype_name(s.dtype()));
  if (broadcast_shapes(s.shape(), grad.shape(), op) != s.shape())
    fail<ShapeError>("{}: gradient {} does not broadcast to the input's shape {}", op, to_string(grad.shape()),
                     to_string(s.shape()));
  const int64_t D = s.shape().back(), R = s.numel() / D;
  if (mean.numel() != R || rstd.numel() != R)
    fail<ShapeError>("{}: mean {} and rstd {} must have one value per row of {} ({} rows)", op,
                     to_string(mean.shape()), to_string(rstd.shape()), to_string(s.shape()), R);
  LayerNormGrads out;
  if (need_dx) out.dx = Tensor::empty(s.shape(), s.dtype());  // (..., D)
  const int64_t nblocks = (R + kBlockRows - 1) / kBlockRows;
  Tensor part_w = need_dweight ? Tensor::empty(Dims{nblocks, D}, s.dtype()) : Tensor();  // (blocks, D)
  Tensor part_b = need_dbias ? Tensor::empty(Dims{nblocks, D}, s.dtype()) : Tensor();    // (blocks, D)
  const Tensor ss = unit_rows(s, s.shape()), gs = unit_rows(grad, s.shape());
  const Tensor m = contiguous(mean), rs = contiguous(rstd);
  const Tensor w = weight.defined() ? contiguous(weight) : Tensor();
  dispatch_floating(s.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const RowPtr<T> S(ss), G(gs);
    const T *pm = m.data<T>(), *pr = rs.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    T* pdx = need_dx ? out.dx.data<T>() : nullptr;
    T* pdw = need_dweight ? part_w.data<T>() : nullptr;
    T* pdb = need_dbias ? part_b.data<T>() : nullptr;
    for_row_blocks(R, D, [&](int64_t r0, int64_t r1, int64_t blk) {
      T* dw = pdw ? pdw + blk * D : nullptr;  // (D), this block's partial sums
      T* db = pdb ? pdb + blk * D : nullptr;  // (D)
      if (dw) std::fill_n(dw, D, T(0));
      if (db) std::fill_n(db, D, T(0));
      for (int64_t r = r0; r < r1; ++r) {
        const T *sr = S[r], *g = G[r];  // (D), (D)
        const T mr = pm[r], rr = pr[r];
        if (pdx) {
          T sum_gy, sum_gyx;
          backward_sums(sr, g, pw, D, mr, rr, &sum_gy, &sum_gyx);
          const T a = sum_gy / T(D), c = sum_gyx / T(D);
          T* dx = pdx + r * D;  // (D)
          if (pw) {
            for (int64_t j = 0; j < D; ++j) dx[j] = rr * (g[j] * pw[j] - a - (sr[j] - mr) * rr * c);
          } else {
            for (int64_t j = 0; j < D; ++j) dx[j] = rr * (g[j] - a - (sr[j] - mr) * rr * c);
          }
        }
        if (dw)
          for (int64_t j = 0; j < D; ++j) dw[j] += g[j] * ((sr[j] - mr) * rr);
        if (db)
          for (int64_t j = 0; j < D; ++j) db[j] += g[j];
      }
    });
  });
  if (need_dweight) out.dweight = sum(part_w, {0}, false);  // (D), blocks added in order
  if (need_dbias) out.dbias = sum(part_b, {0}, false);      // (D)
  return out;
}

Tensor bias_gelu(const Tensor& x, const Tensor& bias, bool tanh_form) {
  const char* op = "bias_gelu";
  check_input(op, x);
  if (!bias.defined()) fail<ValueError>("{}: bias is undefined (use gelu for no bias)", op);
  check_vector(op, "bias", bias, x);
  const int64_t D = x.shape().back(), R = x.numel() / D;
  Tensor out = Tensor::empty(x.shape(), x.dtype());  // (..., D)
  const Tensor xs = unit_rows(x, x.shape()), b = contiguous(bias);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const RowPtr<T> X(xs);
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    parallel_for(R, std::max<int64_t>(1, kParallelGrain / D), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = X[r];  // (D)
        T* y = po + r * D;   // (D)
        if (tanh_form) {
          for (int64_t j = 0; j < D; ++j) y[j] = gelu_tanh(T(xr[j] + pb[j]));
        } else {
          for (int64_t j = 0; j < D; ++j) y[j] = gelu_erf(T(xr[j] + pb[j]));
        }
      }
    });
  });
  return out;
}

std::pair<Tensor, Tensor> bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias, bool tanh_form,
                                             bool need_dbias) {
  const char* op = "bias_gelu_backward";
  check_input(op, x);
  check_vector(op, "bias", bias, x);
  if (grad.dtype() != x.dtype())
    fail<DTypeError>("{}: gradient is {} but the input is {}", op, dtype_name(grad.dtype()), dtype_name(x.dtype()));
  if (broadcast_shapes(x.shape(), grad.shape(), op) != x.shape())
    fail<ShapeError>("{}: gradient {} does not broadcast to the input's shape {}", op, to_string(grad.shape()),
                     to_string(x.shape()));
  const int64_t D = x.shape().back(), R = x.numel() / D;
  Tensor dx = Tensor::empty(x.shape(), x.dtype());  // (..., D)
  const int64_t nblocks = (R + kBlockRows - 1) / kBlockRows;
  Tensor part = need_dbias ? Tensor::empty(Dims{nblocks, D}, x.dtype()) : Tensor();  // (blocks, D)
  const Tensor xs = unit_rows(x, x.shape()), gs = unit_rows(grad, x.shape()), b = contiguous(bias);
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const RowPtr<T> X(xs), G(gs);
    const T* pb = b.data<T>();
    T* pdx = dx.data<T>();
    T* pp = need_dbias ? part.data<T>() : nullptr;
    for_row_blocks(R, D, [&](int64_t r0, int64_t r1, int64_t blk) {
      T* db = pp ? pp + blk * D : nullptr;  // (D), this block's partial sums
      if (db) std::fill_n(db, D, T(0));
      for (int64_t r = r0; r < r1; ++r) {
        const T *xr = X[r], *g = G[r];  // (D), (D)
        T* d = pdx + r * D;             // (D)
        if (tanh_form) {
          for (int64_t j = 0; j < D; ++j) d[j] = g[j] * gelu_tanh_grad(T(xr[j] + pb[j]));
        } else {
          for (int64_t j = 0; j < D; ++j) d[j] = g[j] * gelu_erf_grad(T(xr[j] + pb[j]));
        }
        if (db)
          for (int64_t j = 0; j < D; ++j) db[j] += d[j];
      }
    });
  });
  return {dx, need_dbias ? sum(part, {0}, false) : Tensor()};
}

}  // namespace attnlab::kernels

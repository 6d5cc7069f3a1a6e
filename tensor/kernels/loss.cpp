// Fused cross-entropy over rows of logits (R, C) with int64 targets (R): per row, one pass
// for the max, one for log-sum-exp and the sums the loss needs, so the (R, C) log-softmax is
// never written out. The formula, with eps the label smoothing and lse_r = log sum_c exp x_rc:
//   loss_r = (1 - eps) (lse_r - x_{r,t_r}) + eps (lse_r - mean_c x_rc)
//          = (1 - eps) * nll_r + eps * mean_c(-log p_rc)          (PyTorch's label smoothing)
//   dloss_r / dx_rc = p_rc - q_rc,  q_rc = (1 - eps) [c == t_r] + eps / C.
// Rows whose target is ignore_index have loss 0 and gradient 0. The composed twin that tests
// compare against is nn::cross_entropy_reference (log_softmax, gather, masked mean).
#include <cmath>

#include "tensor/kernels.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

void check_rows(const Tensor& logits, const Tensor& targets, const char* op) {
  if (logits.dim() != 2)
    fail<ShapeError>("{}: logits must be (R, C), got {}", op, to_string(logits.shape()));
  if (targets.dtype() != kInt64)
    fail<DTypeError>("{}: targets must be int64 class indices, got {}", op, dtype_name(targets.dtype()));
  if (targets.dim() != 1 || targets.shape()[0] != logits.shape()[0])
    fail<ShapeError>("{}: targets {} do not match logits {} (expected ({}))", op, to_string(targets.shape()),
                     to_string(logits.shape()), logits.shape()[0]);
}

// Row max, then sum_c exp(x_c - max) and sum_c x_c. Each is kept in kLanes independent
// partial results: a single running sum is a dependency chain the compiler may not reorder,
// while independent lanes vectorise. Partials are combined in double.
constexpr int64_t kLanes = 16;

template <class T>
void row_stats(const T* x, int64_t C, T* max_out, double* sumexp_out, double* sumx_out) {
  T mx[kLanes], se[kLanes], sx[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) {
    mx[j] = -INFINITY;
    se[j] = sx[j] = 0;
  }
  const int64_t full = C - C % kLanes;
  for (int64_t c = 0; c < full; c += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) mx[j] = x[c + j] > mx[j] ? x[c + j] : mx[j];
  T m = -INFINITY;
  for (int64_t j = 0; j < kLanes; ++j) m = mx[j] > m ? mx[j] : m;
  for (int64_t c = full; c < C; ++c) m = x[c] > m ? x[c] : m;
  for (int64_t c = 0; c < full; c += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      se[j] += exp_fast(T(x[c + j] - m));
      sx[j] += x[c + j];
    }
  double s = 0, t = 0;
  for (int64_t j = 0; j < kLanes; ++j) {
    s += se[j];
    t += sx[j];
  }
  for (int64_t c = full; c < C; ++c) {
    s += exp_fast(T(x[c] - m));
    t += x[c];
  }
  *max_out = m;
  *sumexp_out = s;
  *sumx_out = t;
}

}  // namespace

std::pair<Tensor, Tensor> cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                             double smoothing) {
  check_rows(logits, targets, "cross_entropy");
  const int64_t R = logits.shape()[0], C = logits.shape()[1];
  Tensor x = contiguous(logits), t = contiguous(targets);
  const int64_t* pt = t.data<int64_t>();
  for (int64_t r = 0; r < R; ++r)  // before any thread starts, so the error is deterministic
    if (pt[r] != ignore_index && (pt[r] < 0 || pt[r] >= C))
      fail<IndexError>("cross_entropy: target {} (row {}) is out of range for {} classes (expected 0 to {}, or "
                       "ignore_index {})",
                       pt[r], r, C, C - 1, ignore_index);
  Tensor loss = Tensor::empty(Dims{R}, logits.dtype());  // (R)
  Tensor lse = Tensor::empty(Dims{R}, logits.dtype());   // (R)
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T *pl = loss.data<T>(), *pz = lse.data<T>();
    parallel_for(R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = px + r * C;  // (C)
        T m;
        double s, sx;
        row_stats(row, C, &m, &s, &sx);
        const double z = double(m) + std::log(s);
        pz[r] = T(z);
        if (pt[r] == ignore_index) {
          pl[r] = T(0);
          continue;
        }
        const double nll = z - double(row[pt[r]]);
        pl[r] = T(smoothing == 0 ? nll : (1 - smoothing) * nll + smoothing * (z - sx / double(C)));
      }
    });
  });
  return {loss, lse};
}

Tensor cross_entropy_rows_backward(const Tensor& grad, double scale, const Tensor& logits, const Tensor& targets,
                                   const Tensor& lse, int64_t ignore_index, double smoothing) {
  check_rows(logits, targets, "cross_entropy_backward");
  const int64_t R = logits.shape()[0], C = logits.shape()[1];
  if (grad.numel() != R && grad.numel() != 1)
    fail<ShapeError>("cross_entropy_backward: gradient {} has neither 1 nor {} elements", to_string(grad.shape()), R);
  Tensor x = contiguous(logits), t = contiguous(targets), z = contiguous(lse), g = contiguous(grad);
  Tensor out = Tensor::empty(Dims{R, C}, logits.dtype());  // (R, C)
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.data<T>(), *pz = z.data<T>(), *pg = g.data<T>();
    const int64_t* pt = t.data<int64_t>();
    const int64_t gstride = g.numel() == 1 ? 0 : 1;
    T* po = out.data<T>();
    const T off = T(smoothing / double(C)), on = T(1 - smoothing);
    parallel_for(R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = px + r * C;  // (C)
        T* o = po + r * C;          // (C)
        if (pt[r] == ignore_index) {
          for (int64_t c = 0; c < C; ++c) o[c] = T(0);
          continue;
        }
        const T w = T(double(pg[r * gstride]) * scale), lz = pz[r];
        for (int64_t c = 0; c < C; ++c) o[c] = (exp_fast(T(row[c] - lz)) - off) * w;
        o[pt[r]] -= on * w;
      }
    });
  });
  return out;
}

}  // namespace attnlab::kernels

// The decayed exclusive scan of chunked retention (see decay_scan.hpp) and its autograd op.
#include "nn/attention/kernels/decay_scan.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/node.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn::scan {
namespace {

// Checks the shapes and returns B h (the rows), J and E (the trailing elements per step).
struct ScanShape {
  int64_t rows, heads, J, E;
};

ScanShape scan_shape(const Tensor& a, const std::vector<double>& decay, const char* op) {
  if (a.dim() < 3)
    fail<ShapeError>("{}: expected a of shape (B, h, J, ...), got {}", op, to_string(a.shape()));
  if (int64_t(decay.size()) != a.size(1))
    fail<ShapeError>("{}: {} decay factors for {} heads (a of shape {})", op, decay.size(), a.size(1),
                     to_string(a.shape()));
  const int64_t J = a.size(2);
  const int64_t E = J ? a.numel() / (a.size(0) * a.size(1) * J) : 0;
  return {a.size(0) * a.size(1), a.size(1), J, E};
}

// out = the scan of x, rows (B h) independent, row r decayed by decay[r % h]. Forward
// (reverse = false): out[0] = 0, out[j] = d out[j - 1] + x[j - 1]. Reverse: out[J - 1] = 0,
// out[j] = d out[j + 1] + x[j + 1]. x contiguous, no autograd.
Tensor run_scan(const Tensor& x0, const std::vector<double>& decay, bool reverse) {
  const Tensor x = attnlab::kernels::contiguous(x0);
  const ScanShape s = scan_shape(x, decay, "decayed_exclusive_scan");
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  dispatch_floating(x.dtype(), "decayed_exclusive_scan", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t J = s.J, E = s.E;
    parallel_for(s.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, J * E)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T d = static_cast<T>(decay[r % s.heads]);
        const T* xr = px + r * J * E;
        T* orow = po + r * J * E;
        const int64_t first = reverse ? J - 1 : 0, step = reverse ? -1 : 1;
        std::fill(orow + first * E, orow + first * E + E, T(0));
        for (int64_t j = first + step; j >= 0 && j < J; j += step) {
          const T* prev = orow + (j - step) * E;  // out[j - 1] (out[j + 1] reversed)
          const T* in = xr + (j - step) * E;      // x[j - 1]   (x[j + 1] reversed)
          T* cur = orow + j * E;
          for (int64_t e = 0; e < E; ++e) cur[e] = d * prev[e] + in[e];
        }
      }
    });
  });
  return out;
}

}  // namespace

Tensor decayed_exclusive_scan(const Tensor& a, const std::vector<double>& decay) {
  Tensor out = run_scan(a, decay, false);  // (B, h, J, ...)
  return record("decayed_exclusive_scan", out, {a}, [decay](const Tensor& g, const Tensor&, const Node&) {
    return Grads{run_scan(g, decay, true)};
  });
}

Tensor decayed_exclusive_scan_reference(const Tensor& a, const std::vector<double>& decay) {
  const ScanShape s = scan_shape(a, decay, "decayed_exclusive_scan_reference");
  const Tensor x = attnlab::kernels::contiguous(to(a.detach(), kFloat64));
  std::vector<double> out(size_t(s.rows * s.J * s.E), 0.0);
  const double* px = x.data<double>();
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t j = 0; j < s.J; ++j)
      for (int64_t m = 0; m < j; ++m)
        for (int64_t e = 0; e < s.E; ++e)
          out[size_t((r * s.J + j) * s.E + e)] +=
              std::pow(decay[r % s.heads], double(j - 1 - m)) * px[(r * s.J + m) * s.E + e];
  return to(from_vector(out, a.shape()), a.dtype());
}

}  // namespace attnlab::nn::scan

// The chunked prefix-product scan of linear attention (see linear_scan.hpp) and its autograd op.
#include "nn/attention/kernels/linear_scan.hpp"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "autograd/node.hpp"
#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn::scan {
namespace {

// C = alpha op(A) op(B) + beta C, row-major.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T beta,
          T* C, int64_t ldc) {
  auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, tA, tB, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

// One row of the batch: a, b (N, F), c (N, E) -> o (N, E). S (F, E) and W (kScanChunk^2) are
// the caller's scratch.
template <class T>
void scan_row(const T* a, const T* b, const T* c, T* o, int64_t N, int64_t F, int64_t E, bool reverse, T* S, T* W) {
  std::fill(S, S + F * E, T(0));
  const int64_t chunks = (N + kScanChunk - 1) / kScanChunk;
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t ci = reverse ? chunks - 1 - i : i;
    const int64_t s0 = ci * kScanChunk, L = std::min(kScanChunk, N - s0);
    const T *ac = a + s0 * F, *bc = b + s0 * F, *cc = c + s0 * E;
    T* oc = o + s0 * E;
    gemm<T>(false, true, L, L, F, ac, F, bc, F, T(0), W, L);  // W[n, m] = a[n] . b[m]   (L, L)
    for (int64_t n = 0; n < L; ++n)                           // keep m <= n (m >= n reversed)
      for (int64_t m = 0; m < L; ++m)
        if (reverse ? m < n : m > n) W[n * L + m] = T(0);
    gemm<T>(false, false, L, E, L, W, L, cc, E, T(0), oc, E);  // within the chunk      (L, E)
    gemm<T>(false, false, L, E, F, ac, F, S, E, T(1), oc, E);  // + the earlier chunks  (L, F)(F, E)
    gemm<T>(true, false, F, E, L, bc, F, cc, E, T(1), S, E);   // S += b^T c            (F, E)
  }
}

}  // namespace

Tensor prefix_product(const Tensor& a0, const Tensor& b0, const Tensor& c0, bool reverse) {
  const Tensor a = attnlab::kernels::contiguous(a0), b = attnlab::kernels::contiguous(b0),
               c = attnlab::kernels::contiguous(c0);
  const int64_t R = a.size(0), N = a.size(1), F = a.size(2), E = c.size(2);
  Tensor out = Tensor::empty({R, N, E}, a.dtype());
  if (out.numel() == 0) return out;
  dispatch_floating(a.dtype(), "causal_product", [&](auto tag) {
    using T = decltype(tag);
    const T *pa = a.data<T>(), *pb = b.data<T>(), *pc = c.data<T>();
    T* po = out.data<T>();
    const int64_t per_row = std::max<int64_t>(1, N * (F + E) * std::min<int64_t>(N, kScanChunk));
    parallel_for(R, std::max<int64_t>(1, kParallelGrain / per_row), [&](int64_t r0, int64_t r1) {
      std::vector<T> S(F * E), W(kScanChunk * kScanChunk);
      for (int64_t r = r0; r < r1; ++r)
        scan_row<T>(pa + r * N * F, pb + r * N * F, pc + r * N * E, po + r * N * E, N, F, E, reverse, S.data(),
                    W.data());
    });
  });
  return out;
}

Tensor causal_product(const Tensor& a, const Tensor& b, const Tensor& c, bool reverse) {
  if (a.dim() < 2 || a.shape() != b.shape() || c.dim() != a.dim() || c.size(-2) != a.size(-2))
    fail<ShapeError>("causal_product: expected a, b (..., N, F) and c (..., N, E) with equal leading dims, got {}, {}, {}",
                     to_string(a.shape()), to_string(b.shape()), to_string(c.shape()));
  for (int64_t d = 0; d + 2 < a.dim(); ++d)
    if (c.size(d) != a.size(d))
      fail<ShapeError>("causal_product: leading dims of c {} differ from a's {}", to_string(c.shape()),
                       to_string(a.shape()));
  if (a.dtype() != b.dtype() || a.dtype() != c.dtype() || !a.is_floating_point())
    fail<DTypeError>("causal_product: a, b, c must share one floating dtype, got {}, {}, {}", dtype_name(a.dtype()),
                     dtype_name(b.dtype()), dtype_name(c.dtype()));
  Dims lead;
  lead.assign(a.shape().begin(), a.shape().end() - 2);
  const int64_t R = numel_of(lead), N = a.size(-2), F = a.size(-1), E = c.size(-1);
  // Flat (R, N, width) views of contiguous data, without history. Captured by value: backward
  // runs after this function returns.
  auto flat = [R, N](const Tensor& t, int64_t w) {
    Tensor ct = attnlab::kernels::contiguous(t);
    return ct.as_strided({R, N, w}, {N * w, w, 1}, ct.offset());
  };
  auto unflat = [lead, N](const Tensor& t, int64_t w) {
    Dims s = lead;
    s.push_back(N);
    s.push_back(w);
    return t.as_strided(s, contiguous_strides(s), t.offset());
  };
  Tensor fa = flat(a, F), fb = flat(b, F), fc = flat(c, E);
  Tensor out = unflat(prefix_product(fa, fb, fc, reverse), E);  // (..., N, E)
  return record("causal_product", out, {a, b, c},
                [fa, fb, fc, reverse, F, E, flat, unflat](const Tensor& g, const Tensor&, const Node& node) {
                  Tensor fg = flat(g, E);
                  Grads grads(3);
                  if (node.needs_grad(0)) grads[0] = unflat(prefix_product(fg, fc, fb, reverse), F);
                  if (node.needs_grad(1)) grads[1] = unflat(prefix_product(fc, fg, fa, !reverse), F);
                  if (node.needs_grad(2)) grads[2] = unflat(prefix_product(fb, fa, fg, !reverse), E);
                  return grads;
                });
}

Tensor causal_product_reference(const Tensor& a, const Tensor& b, const Tensor& c, bool reverse) {
  if (a.dim() != 3 || a.shape() != b.shape() || c.dim() != 3 || c.size(0) != a.size(0) || c.size(1) != a.size(1))
    fail<ShapeError>("causal_product_reference: expected a, b (R, N, F) and c (R, N, E), got {}, {}, {}",
                     to_string(a.shape()), to_string(b.shape()), to_string(c.shape()));
  const int64_t R = a.size(0), N = a.size(1), F = a.size(2), E = c.size(2);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  std::vector<double> o(R * N * E, 0.0);  // (R, N, E)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < N; ++m) {
        if (reverse ? m < n : m > n) continue;
        double w = 0;  // a[r, n] . b[r, m]
        for (int64_t f = 0; f < F; ++f) w += av[(r * N + n) * F + f] * bv[(r * N + m) * F + f];
        for (int64_t e = 0; e < E; ++e) o[(r * N + n) * E + e] += w * cv[(r * N + m) * E + e];
      }
  return to(from_vector(o, {R, N, E}), a.dtype());
}

}  // namespace attnlab::nn::scan

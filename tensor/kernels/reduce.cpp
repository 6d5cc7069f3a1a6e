// Reductions: sum over any set of dims, broadcast-gradient reduction (sum_to), max/min with
// indices along one dim.
#include <cmath>
#include <limits>

#include "tensor/kernels.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

// src is contiguous (A, R, C); out is contiguous (A, C).
template <class T>
void sum_arc(const T* src, T* out, int64_t A, int64_t R, int64_t C) {
  if (C == 1) {
    constexpr int64_t kBlock = 1 << 16;  // fixed partial-sum blocks: reproducible for any threads
    if (A == 1 && R > 2 * kBlock) {
      int64_t nb = (R + kBlock - 1) / kBlock;
      std::vector<T> part(nb);
      parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) part[b] = sum_row(src + b * kBlock, std::min(kBlock, R - b * kBlock));
      });
      T s = 0;
      for (T v : part) s += v;
      out[0] = s;
      return;
    }
    parallel_for(A, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R, 1)), [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) out[a] = sum_row(src + a * R, R);
    });
    return;
  }
  // Column sums: split the (A, C) outputs so no two threads write the same element.
  int64_t cblock = std::min<int64_t>(C, 256);
  int64_t ncb = (C + cblock - 1) / cblock;
  parallel_for(A * ncb, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(R * cblock, 1)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   int64_t a = t / ncb, c0 = (t % ncb) * cblock, c1 = std::min(C, c0 + cblock);
                   T* __restrict o = out + a * C;
                   for (int64_t c = c0; c < c1; ++c) o[c] = 0;
                   // Four rows per pass: one load and store of the output block per four
                   // input rows. The addition order is fixed, whatever the thread count.
                   int64_t r = 0;
                   for (; r + 4 <= R; r += 4) {
                     const T* __restrict s0 = src + (a * R + r) * C;
                     const T* __restrict s1 = s0 + C;
                     const T* __restrict s2 = s1 + C;
                     const T* __restrict s3 = s2 + C;
                     for (int64_t c = c0; c < c1; ++c) o[c] += (s0[c] + s1[c]) + (s2[c] + s3[c]);
                   }
                   for (; r < R; ++r) {
                     const T* __restrict s = src + (a * R + r) * C;
                     for (int64_t c = c0; c < c1; ++c) o[c] += s[c];
                   }
                 }
               });
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int nd = x.dim();
  bool reduce[Dims::kMax] = {};
  if (dims.empty()) {
    for (int d = 0; d < nd; ++d) reduce[d] = true;
  } else {
    for (int64_t d : dims) {
      int w = wrap_dim(d, nd, "sum");
      if (nd == 0) continue;
      if (reduce[w]) fail<ValueError>("sum: dim {} appears more than once in the reduced dims", d);
      reduce[w] = true;
    }
  }
  Dims out_keep, out_shape;
  for (int d = 0; d < nd; ++d) {
    out_keep.push_back(reduce[d] ? 1 : x.shape()[d]);
    if (!reduce[d]) out_shape.push_back(x.shape()[d]);
  }
  Tensor out = Tensor::empty(keepdim ? out_keep : out_shape, x.dtype() == kBool ? kInt64 : x.dtype());
  Tensor src = x.dtype() == kBool ? to_dtype(x, kInt64) : x;

  // Contiguous input whose reduced dims form one block [lo, hi]: read it as (A, R, C) in place.
  int lo = -1, hi = -1;
  for (int d = 0; d < nd; ++d)
    if (reduce[d]) {
      if (lo < 0) lo = d;
      hi = d;
    }
  bool block = lo >= 0;
  for (int d = lo; block && d <= hi; ++d) block = reduce[d];
  int64_t A = 1, R = 1, C = 1;
  if (lo < 0) {  // nothing to reduce (0-d input)
    copy_(out, src);
    return out;
  }
  if (!(block && src.is_contiguous())) {
    Dims sh, st;  // kept dims first, then reduced dims
    for (int pass = 0; pass < 2; ++pass)
      for (int d = 0; d < nd; ++d)
        if (reduce[d] == (pass == 1)) {
          sh.push_back(src.shape()[d]);
          st.push_back(src.strides()[d]);
        }
    src = contiguous(src.as_strided(sh, st, src.offset()));
    for (int d = 0; d < nd; ++d) (reduce[d] ? R : A) *= x.shape()[d];
  } else {
    for (int d = 0; d < lo; ++d) A *= x.shape()[d];
    for (int d = lo; d <= hi; ++d) R *= x.shape()[d];
    for (int d = hi + 1; d < nd; ++d) C *= x.shape()[d];
  }
  if (out.numel() == 0) return out;  // e.g. kept dims of size 0: C = 0 would divide by zero below
  dispatch_numeric(out.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    sum_arc<T>(static_cast<const T*>(src.raw_data()), static_cast<T*>(out.raw_data()), A, R, C);
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Dims& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.size();
  if (lead < 0)
    fail<ShapeError>("sum_to: cannot reduce shape {} to the larger shape {}", to_string(x.shape()), to_string(shape));
  thread_local std::vector<int64_t> dims;  // reused: the engine calls this for every broadcast input
  dims.clear();
  for (int d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.shape()[d] != 1) {
      dims.push_back(d);
    } else if (shape[d - lead] != x.shape()[d]) {
      fail<ShapeError>("sum_to: shape {} is not a broadcast of {}", to_string(x.shape()), to_string(shape));
    }
  }
  Tensor s = sum(x, dims, true);  // keeps every dim; then drop the leading ones
  return s.as_strided(shape, contiguous_strides(shape), s.offset());
}

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  int d = wrap_dim(dim, x.dim(), name);
  if (x.dim() == 0) return {x, scalar_tensor(0, kInt64)};
  int64_t L = x.shape()[d];
  if (L == 0) fail<ValueError>("{}: cannot reduce dim {} of size 0 (shape {})", name, dim, to_string(x.shape()));
  Tensor src = contiguous(move_dim_last(x, d));
  int64_t rows = src.numel() / L;
  Dims keep = x.shape();
  keep[d] = 1;
  Tensor values = Tensor::empty(keep, x.dtype()), indices = Tensor::empty(keep, kInt64);
  dispatch_numeric(x.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(src.raw_data());
    T* v = static_cast<T*>(values.raw_data());
    int64_t* ix = static_cast<int64_t*>(indices.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / L), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = p + r * L;
        int64_t best = 0;
        for (int64_t j = 1; j < L; ++j) {
          T a = row[j], b = row[best];
          if (b != b) break;  // NaN wins, first one
          if (a != a || (is_max ? a > b : a < b)) best = j;
        }
        v[r] = row[best];
        ix[r] = best;
      }
    });
  });
  if (!keepdim) {
    Dims sh = x.shape();
    sh.erase(d);
    values = values.as_strided(sh, contiguous_strides(sh), 0);
    indices = indices.as_strided(sh, contiguous_strides(sh), 0);
  }
  return {values, indices};
}

}  // namespace attnlab::kernels

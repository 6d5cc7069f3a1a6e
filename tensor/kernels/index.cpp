// Indexing and structure: gather, scatter_add, index_select, index_add_, cat, cumsum, sort,
// topk, tril/triu.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor/kernels.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

void check_index_tensor(const Tensor& index, const char* op) {
  if (index.dtype() != kInt64) fail<DTypeError>("{}: indices must be int64, got {}", op, dtype_name(index.dtype()));
}

// Every index in [-size, size) (negative counts from the end); returns them wrapped.
Tensor checked_indices(const Tensor& index, int64_t size, const char* op) {
  check_index_tensor(index, op);
  Tensor idx = clone(index);
  int64_t* p = static_cast<int64_t*>(idx.raw_data());
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (p[i] < -size || p[i] >= size)
      fail<IndexError>("{}: index {} is out of range for a dim of size {}", op, p[i], size);
    if (p[i] < 0) p[i] += size;
  }
  return idx;
}

// gather/scatter share their shape rule: index has x's rank, and for d != dim, index.size(d)
// <= x.size(d).
void check_gather_shapes(const Tensor& x, int d, const Tensor& index, const char* op, const char* what) {
  if (index.dim() != x.dim())
    fail<ShapeError>("{}: index has {} dims but {} has {} (shapes {} and {})", op, index.dim(), what, x.dim(),
                     to_string(index.shape()), to_string(x.shape()));
  for (int i = 0; i < x.dim(); ++i)
    if (i != d && index.shape()[i] > x.shape()[i])
      fail<ShapeError>("{}: index shape {} exceeds {} shape {} at dim {}", op, to_string(index.shape()), what,
                       to_string(x.shape()), i);
}

}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  int d = wrap_dim(dim, x.dim(), "gather");
  if (x.dim() == 0) return clone(x);
  check_gather_shapes(x, d, index, "gather", "input");
  Tensor idx = checked_indices(index, x.shape()[d], "gather");
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  Tensor xv = move_dim_last(x, d), iv = move_dim_last(idx, d), ov = move_dim_last(out, d);
  const int64_t L = iv.shape().back(), rows = L ? iv.numel() / L : 0;
  const int nlead = iv.dim() - 1;
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(xv.raw_data());
    T* po = static_cast<T*>(ov.raw_data());
    const int64_t* pi = static_cast<const int64_t*>(iv.raw_data());
    const int64_t xs = xv.strides().back(), os = ov.strides().back(), is = iv.strides().back();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = px + row_offset(r, iv.shape(), xv.strides(), nlead);
        T* orow = po + row_offset(r, iv.shape(), ov.strides(), nlead);
        const int64_t* ir = pi + row_offset(r, iv.shape(), iv.strides(), nlead);
        for (int64_t j = 0; j < L; ++j) orow[j * os] = xr[ir[j * is] * xs];
      }
    });
  });
  return out;
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  int d = wrap_dim(dim, self.dim(), "scatter_add");
  if (self.dtype() != src.dtype())
    fail<DTypeError>("scatter_add: dtypes differ: self {} and src {}", dtype_name(self.dtype()), dtype_name(src.dtype()));
  if (self.dim() == 0) return binary(Binary::Add, self, src, "scatter_add");
  check_gather_shapes(self, d, index, "scatter_add", "self");
  if (index.shape() != src.shape())
    fail<ShapeError>("scatter_add: index shape {} and src shape {} must match", to_string(index.shape()),
                     to_string(src.shape()));
  Tensor idx = checked_indices(index, self.shape()[d], "scatter_add");
  Tensor out = clone(self);
  Tensor ov = move_dim_last(out, d), iv = move_dim_last(idx, d), sv = move_dim_last(src, d);
  const int64_t L = iv.shape().back(), rows = L ? iv.numel() / L : 0;
  const int nlead = iv.dim() - 1;
  dispatch_numeric(self.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    T* po = static_cast<T*>(ov.raw_data());
    const T* ps = static_cast<const T*>(sv.raw_data());
    const int64_t* pi = static_cast<const int64_t*>(iv.raw_data());
    const int64_t os = ov.strides().back(), ss = sv.strides().back(), is = iv.strides().back();
    // Rows differ in their leading coordinates, so they write disjoint parts of `out`.
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        T* orow = po + row_offset(r, iv.shape(), ov.strides(), nlead);
        const T* sr = ps + row_offset(r, iv.shape(), sv.strides(), nlead);
        const int64_t* ir = pi + row_offset(r, iv.shape(), iv.strides(), nlead);
        for (int64_t j = 0; j < L; ++j) orow[ir[j * is] * os] += sr[j * ss];
      }
    });
  });
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  int d = wrap_dim(dim, x.dim(), "index_select");
  if (index.dim() > 1)
    fail<ShapeError>("index_select: index must be 0-d or 1-d, got shape {}", to_string(index.shape()));
  if (x.dim() == 0) fail<ShapeError>("index_select: cannot index a 0-d tensor");
  Tensor idx = checked_indices(index, x.shape()[d], "index_select");
  const int64_t n = idx.numel();
  const int64_t* pi = static_cast<const int64_t*>(idx.raw_data());
  Dims shape = x.shape();
  shape[d] = n;
  Tensor out = Tensor::empty(shape, x.dtype());
  if (d == 0 && x.is_contiguous()) {  // rows of a table, e.g. an embedding lookup
    const int64_t row = x.numel() / std::max<int64_t>(x.shape()[0], 1) * itemsize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    parallel_for(n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row, 1)), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::memcpy(dst + i * row, src + pi[i] * row, row);
    });
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    Dims sh = x.shape();
    sh[d] = 1;
    copy_(out.as_strided(sh, out.strides(), out.offset() + i * out.strides()[d]),
          x.as_strided(sh, x.strides(), x.offset() + pi[i] * x.strides()[d]));
  }
  return out;
}

void index_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  int d = wrap_dim(dim, out.dim(), "index_add_");
  Tensor idx = checked_indices(index, out.shape()[d], "index_add_");
  const int64_t n = idx.numel();
  if (src.dim() != out.dim() || src.shape()[d] != n)
    fail<ShapeError>("index_add_: src shape {} does not match out shape {} with {} indices along dim {}",
                     to_string(src.shape()), to_string(out.shape()), n, d);
  const int64_t* pi = static_cast<const int64_t*>(idx.raw_data());
  if (d == 0 && out.is_contiguous() && src.is_contiguous() && out.dtype() == src.dtype()) {
    const int64_t row = out.numel() / std::max<int64_t>(out.shape()[0], 1);
    dispatch_numeric(out.dtype(), "index_add_", [&](auto tag) {
      using T = decltype(tag);
      T* po = static_cast<T*>(out.raw_data());
      const T* ps = static_cast<const T*>(src.raw_data());
      // Split the columns: each thread owns a column range of every row, so duplicates are safe.
      parallel_for(row, std::max<int64_t>(64, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t c0, int64_t c1) {
        for (int64_t i = 0; i < n; ++i) {
          T* o = po + pi[i] * row;
          const T* s = ps + i * row;
          for (int64_t c = c0; c < c1; ++c) o[c] += s[c];
        }
      });
    });
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    Dims sh = out.shape();
    sh[d] = 1;
    binary_(Binary::Add, out.as_strided(sh, out.strides(), out.offset() + pi[i] * out.strides()[d]),
            src.as_strided(sh, src.strides(), src.offset() + i * src.strides()[d]), "index_add_");
  }
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) fail<ValueError>("cat: expected at least one tensor");
  const Tensor& first = xs[0];
  if (first.dim() == 0) fail<ShapeError>("cat: zero-dimensional tensors cannot be concatenated");
  int d = wrap_dim(dim, first.dim(), "cat");
  Dims shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() != first.dtype())
      fail<DTypeError>("cat: tensor {} is {}, expected {} like tensor 0", i, dtype_name(x.dtype()),
                       dtype_name(first.dtype()));
    bool ok = x.dim() == first.dim();
    for (int j = 0; ok && j < x.dim(); ++j) ok = j == d || x.shape()[j] == first.shape()[j];
    if (!ok)
      fail<ShapeError>("cat: tensor {} has shape {} {}, expected {} with shape {} except at dim {}", i,
                       to_string(x.shape()), dtype_name(x.dtype()), dtype_name(first.dtype()),
                       to_string(first.shape()), d);
    shape[d] += x.shape()[d];
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    copy_(out.as_strided(x.shape(), out.strides(), out.offset() + at * out.strides()[d]), x);
    at += x.shape()[d];
  }
  return out;
}

Tensor cumsum(const Tensor& x, int64_t dim, bool reverse) {
  int d = wrap_dim(dim, x.dim(), "cumsum");
  if (x.dim() == 0) return clone(x);
  Tensor src = contiguous(move_dim_last(x, d));
  Tensor out = Tensor::empty(src.shape(), x.dtype());
  const int64_t L = src.shape().back(), rows = L ? src.numel() / L : 0;
  dispatch_numeric(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    const T* ps = static_cast<const T*>(src.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        T s = 0;
        if (reverse) {
          for (int64_t j = L - 1; j >= 0; --j) po[r * L + j] = s += ps[r * L + j];
        } else {
          for (int64_t j = 0; j < L; ++j) po[r * L + j] = s += ps[r * L + j];
        }
      }
    });
  });
  return d == x.dim() - 1 ? out : contiguous(move_last_to(out, d));
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  int d = wrap_dim(dim, x.dim(), "topk");
  if (x.dim() == 0) return {clone(x), scalar_tensor(0, kInt64)};
  const int64_t L = x.shape()[d];
  if (k < 0 || k > L) fail<ValueError>("topk: k = {} is out of range for dim {} of size {}", k, dim, L);
  Tensor src = contiguous(move_dim_last(x, d));
  Dims sh = src.shape();
  sh[sh.size() - 1] = k;
  Tensor values = Tensor::empty(sh, x.dtype()), indices = Tensor::empty(sh, kInt64);
  const int64_t rows = L ? src.numel() / L : 0;
  dispatch_numeric(x.dtype(), "topk", [&](auto tag) {
    using T = decltype(tag);
    const T* ps = static_cast<const T*>(src.raw_data());
    T* pv = static_cast<T*>(values.raw_data());
    int64_t* pi = static_cast<int64_t*>(indices.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(L, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> order(L);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = ps + r * L;
        std::iota(order.begin(), order.end(), int64_t{0});
        // NaN sorts as the largest value, like PyTorch; ties keep index order (stable).
        auto before = [&](int64_t i, int64_t j) {
          T a = row[i], b = row[j];
          bool an = a != a, bn = b != b;
          if (an || bn) return largest ? (an && !bn) : (!an && bn);
          return largest ? a > b : a < b;
        };
        if (sorted || k == L) {
          std::stable_sort(order.begin(), order.end(), before);
        } else {
          std::stable_sort(order.begin(), order.end(), before);
          std::sort(order.begin(), order.begin() + k);  // unsorted: index order
        }
        for (int64_t j = 0; j < k; ++j) {
          pv[r * k + j] = row[order[j]];
          pi[r * k + j] = order[j];
        }
      }
    });
  });
  if (d == x.dim() - 1) return {values, indices};
  return {contiguous(move_last_to(values, d)), contiguous(move_last_to(indices, d))};
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  int d = wrap_dim(dim, x.dim(), "sort");
  return topk(x, x.dim() ? x.shape()[d] : 1, dim, descending, true);
}

Tensor tril(const Tensor& x, int64_t k, bool upper) {
  const char* name = upper ? "triu" : "tril";
  if (x.dim() < 2) fail<ShapeError>("{}: expected at least 2 dims, got shape {}", name, to_string(x.shape()));
  Tensor src = contiguous(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const int64_t n = x.shape()[x.dim() - 2], m = x.shape().back();
  const int64_t mats = n * m != 0 ? x.numel() / (n * m) : 0;
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* ps = static_cast<const T*>(src.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(mats * n, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r % n;
        for (int64_t j = 0; j < m; ++j) {
          bool keep = upper ? j - i >= k : j - i <= k;
          po[r * m + j] = keep ? ps[r * m + j] : T(0);
        }
      }
    });
  });
  return out;
}

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0) fail<ValueError>("arange: step must be nonzero");
  if ((end - start) / step < 0)
    fail<ValueError>("arange: the range [{}, {}) is empty or has the wrong direction for step {}", start, end, step);
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor out = Tensor::empty(Dims{n}, dtype);
  dispatch_numeric(dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + step * double(i));
  });
  return out;
}

Tensor eye(int64_t n, int64_t m, DType dtype) {
  if (n < 0 || m < 0) fail<ValueError>("eye: sizes must be non-negative, got {} and {}", n, m);
  Tensor out = Tensor::empty(Dims{n, m}, dtype);
  fill_(out, 0);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = T(1);
  });
  return out;
}

void random_(const Tensor& x, Generator& gen, Dist dist, double p0, double p1) {
  Tensor dst = x.is_contiguous() ? x : Tensor::empty(x.shape(), x.dtype());
  const int64_t n = dst.numel();
  const uint64_t first = gen.advance(static_cast<uint64_t>(n));
  const uint64_t seed = gen.seed();
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bfloat16>) {
      fail<DTypeError>("random: cannot draw bfloat16 values; draw float32 and convert (to(x, kBFloat16))");
    } else {
      T* p = static_cast<T*>(dst.raw_data());
      parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          auto r = Generator::philox(seed, first + static_cast<uint64_t>(i));
          double u = bits_to_unit(r[0], r[1]);
          double v = 0;
          switch (dist) {
            case Dist::Uniform: v = p0 + (p1 - p0) * u; break;
            case Dist::Normal: {
              double u2 = bits_to_unit(r[2], r[3]);
              v = p0 + p1 * std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * u2);
              break;
            }
            case Dist::Bernoulli: v = u < p0 ? 1.0 : 0.0; break;
            case Dist::Randint: v = std::floor(p0 + (p1 - p0) * u); break;
          }
          T t = static_cast<T>(v);
          if (dist == Dist::Uniform && t >= static_cast<T>(p1) && p1 > p0) t = std::nextafter(static_cast<T>(p1), T(p0));
          p[i] = t;
        }
      });
    }
  });
  if (!dst.same(x)) copy_(x, dst);
}

}  // namespace attnlab::kernels

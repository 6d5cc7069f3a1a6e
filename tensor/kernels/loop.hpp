/// @file
/// The strided loop every elementwise kernel runs on. K operands (operand 0 is the output)
/// share one shape; each has its own byte strides (0 on broadcast dims). Adjacent dims that
/// are contiguous for every operand are merged first, so a contiguous or simply broadcast
/// operation becomes one long inner loop that the compiler vectorises.
/// @ingroup tensor
#pragma once
#include <array>

#include "tensor/parallel.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

/// The shape and byte strides of K operands, walked by one loop (see the file's description).
template <int K>
struct StridedLoop {
  Dims shape;  ///< the shared shape
  std::array<Dims, K> strides;  ///< in bytes

  /// Drops size-1 dims and merges dims i, i+1 when every operand steps through them as one.
  void coalesce() {
    Dims s;
    std::array<Dims, K> st;
    for (int d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      if (!s.empty()) {
        bool merge = true;
        for (int k = 0; k < K; ++k) merge &= st[k].back() == strides[k][d] * shape[d];
        if (merge) {
          int last = s.size() - 1;
          s[last] *= shape[d];
          for (int k = 0; k < K; ++k) st[k][last] = strides[k][d];
          continue;
        }
      }
      s.push_back(shape[d]);
      for (int k = 0; k < K; ++k) st[k].push_back(strides[k][d]);
    }
    shape = s;
    strides = st;
  }

  /// inner(ptrs, inner_strides, n): n elements along the innermost dim, starting at ptrs.
  template <class F>
  void run(std::array<char*, K> base, F&& inner, int64_t grain = kParallelGrain) {
    coalesce();
    const int nd = shape.size();
    if (nd == 0) {
      std::array<int64_t, K> zero{};
      inner(base, zero, int64_t{1});
      return;
    }
    std::array<int64_t, K> istride;
    for (int k = 0; k < K; ++k) istride[k] = strides[k][nd - 1];
    const int64_t len = shape[nd - 1];
    const int64_t total = numel_of(shape);
    parallel_for(total, grain, [&](int64_t begin, int64_t end) {
      Dims idx = Dims::filled(nd, 0);
      int64_t rem = begin;
      for (int d = nd - 1; d >= 0; --d) {
        idx[d] = rem % shape[d];
        rem /= shape[d];
      }
      int64_t pos = begin;
      while (pos < end) {
        std::array<char*, K> p = base;
        for (int k = 0; k < K; ++k)
          for (int d = 0; d < nd; ++d) p[k] += idx[d] * strides[k][d];
        int64_t n = std::min(len - idx[nd - 1], end - pos);
        inner(p, istride, n);
        pos += n;
        idx[nd - 1] += n;
        for (int d = nd - 1; d > 0 && idx[d] >= shape[d]; --d) {
          idx[d] = 0;
          ++idx[d - 1];
        }
      }
    });
  }
};

/// Byte strides of `t` read as shape `target` (broadcast dims get stride 0).
inline Dims byte_strides(const Tensor& t, const Dims& target) {
  Dims s = broadcast_strides(t.shape(), t.strides(), target);
  for (int64_t& v : s) v *= itemsize(t.dtype());
  return s;
}

}  // namespace attnlab::kernels
/// @}

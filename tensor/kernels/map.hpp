/// @file
/// map1/map2/map3: apply a scalar function elementwise over strided, broadcast operands, with a
/// contiguous fast path the compiler vectorises. Used by elementwise.cpp and copy.cpp.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "tensor/kernels/loop.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

/// Streaming (non-temporal) stores for outputs too big to stay in cache. A normal store first
/// reads the destination line into the cache (read for ownership), so out = a * b moves four
/// tensors' worth of bytes; a streaming store skips that read, three. They pay off only when the
/// operands together exceed the last-level cache: below that, the plain store leaves the output
/// in cache for the next op, which is worth more.
///
/// The last-level cache of the first CPU, in bytes, as sysfs lists it (cache.cpp).
int64_t last_level_cache_bytes();
/// "32768K", "1M", "65536" -> bytes; -1 when the text is not a size.
int64_t parse_cache_size(const std::string& text);

/// o[i] = g(i) for i in [0, n); with `streaming`, through non-temporal stores where the build
/// has AVX and Out is float or double (otherwise, and for the unaligned ends, plain stores).
/// The plain loop is the naive twin: both store the same values.
template <class Out, class G>
inline void store_run(Out* o, int64_t n, bool streaming, G g) {
#if defined(__AVX__)
  if constexpr (std::is_same_v<Out, float> || std::is_same_v<Out, double>) {
    if (streaming) {
      constexpr int64_t W = 32 / sizeof(Out);  // lanes of one 32-byte store
      int64_t i = 0;
      for (; i < n && reinterpret_cast<uintptr_t>(o + i) % 32 != 0; ++i) o[i] = g(i);
      for (; i + W <= n; i += W) {
        alignas(32) Out lane[W];
        for (int64_t k = 0; k < W; ++k) lane[k] = g(i + k);
        if constexpr (std::is_same_v<Out, float>)
          _mm256_stream_ps(o + i, _mm256_load_ps(lane));
        else
          _mm256_stream_pd(o + i, _mm256_load_pd(lane));
      }
      for (; i < n; ++i) o[i] = g(i);
      _mm_sfence();  // streaming stores are weakly ordered: publish them before the task ends
      return;
    }
  }
#endif
  (void)streaming;
  for (int64_t i = 0; i < n; ++i) o[i] = g(i);
}

/// Whether an op writing `out` from inputs of `in_bytes` should stream its stores: the bytes it
/// touches exceed the last-level cache by more than a quarter, and out is not also an input (an
/// in-place op has read the line already, there is nothing to save). Near the cache size, plain
/// stores still win: part of the data survives in the cache from one pass to the next. Measured
/// on this project's VM (32 MB L3, 2 threads): 2048x2048 + 2048 (32 MB touched) ran at 47 GB/s
/// with plain stores and 35 streamed; 2048x2048 * 2048x2048 (48 MB) at 34-37 streamed and
/// 26-36 plain.
inline bool should_stream(const Tensor& out, int64_t in_bytes, bool out_is_input) {
  const int64_t touched = out.numel() * int64_t(itemsize(out.dtype())) + in_bytes;
  return !out_is_input && touched * 4 > last_level_cache_bytes() * 5;
}

/// Whether x, broadcast to out's shape, has out's flat layout: both contiguous, same element
/// count (so they differ at most by size-1 dims). Then flat index i is element i of both, and
/// the chunks parallel_for makes are the strided loop's, so results do not depend on the path.
inline bool same_layout(const Tensor& out, const Tensor& x) {
  return x.numel() == out.numel() && out.is_contiguous() && x.is_contiguous();
}

/// Whether map1 and map2 compile their fast paths for these element types: the contiguous
/// path, the unit-stride and broadcast-scalar inner loops the compiler vectorises, and streaming
/// stores. float32 (training), bfloat16 (autocast) and bool (masks) have them; float64 (gradient
/// checks, references) and int64 (indices, token ids) run the plain strided loop alone, which
/// stores the same values from a fraction of the generated code (the fast paths of every op
/// for every dtype made elementwise.cpp the costliest file of the build; docs/testing.md,
/// "Build time").
template <class... T>
inline constexpr bool kFastPaths = ((!std::is_same_v<T, double> && !std::is_same_v<T, int64_t>) && ...);

/// out[i] = f(x[i]); out has the target shape, x is broadcast to it.
template <class Out, class In, class F>
void map1(const Tensor& out, const Tensor& x, F f) {
  constexpr bool fast = kFastPaths<Out, In>;
  if constexpr (fast) {
    if (same_layout(out, x)) {  // the common case, without the strided loop's set-up
      const bool streaming =
          should_stream(out, x.numel() * int64_t(sizeof(In)), out.raw_data() == x.raw_data());
      Out* o = static_cast<Out*>(out.raw_data());
      const In* a = static_cast<const In*>(x.raw_data());
      parallel_for(out.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) {
        store_run(o + i0, i1 - i0, streaming, [&](int64_t i) { return Out(f(a[i0 + i])); });
      });
      return;
    }
  }
  StridedLoop<2> loop{out.shape(), {byte_strides(out, out.shape()), byte_strides(x, out.shape())}};
  loop.run({static_cast<char*>(out.raw_data()), static_cast<char*>(x.raw_data())},
           [&](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
             if constexpr (fast) {
               if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
                 Out* o = reinterpret_cast<Out*>(p[0]);
                 const In* a = reinterpret_cast<const In*>(p[1]);
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(f(a[i]));
                 return;
               }
             }
             for (int64_t i = 0; i < n; ++i)
               *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
           });
}

/// out[i] = f(a[i], b[i]).
template <class Out, class A, class B, class F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Dims& sh = out.shape();
  constexpr bool fast = kFastPaths<Out, A, B>;
  if constexpr (fast) {
    if (a.numel() == out.numel() && b.numel() == out.numel() && out.is_contiguous() && a.is_contiguous() &&
        b.is_contiguous()) {  // same_layout(out, a) && same_layout(out, b): the common case, no set-up
      const bool streaming =
          should_stream(out, a.numel() * int64_t(sizeof(A)) + b.numel() * int64_t(sizeof(B)),
                        out.raw_data() == a.raw_data() || out.raw_data() == b.raw_data());
      Out* o = static_cast<Out*>(out.raw_data());
      const A* x = static_cast<const A*>(a.raw_data());
      const B* y = static_cast<const B*>(b.raw_data());
      parallel_for(out.numel(), kParallelGrain, [&](int64_t i0, int64_t i1) {
        store_run(o + i0, i1 - i0, streaming, [&](int64_t i) { return Out(f(x[i0 + i], y[i0 + i])); });
      });
      return;
    }
  }
  StridedLoop<3> loop{sh, {byte_strides(out, sh), byte_strides(a, sh), byte_strides(b, sh)}};
  loop.run({static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
           [&](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
             if constexpr (fast) {
               Out* o = reinterpret_cast<Out*>(p[0]);
               const A* x = reinterpret_cast<const A*>(p[1]);
               const B* y = reinterpret_cast<const B*>(p[2]);
               if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(f(x[i], y[i]));
                 return;
               }
               if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {  // b broadcast along the run
                 const B yv = *y;
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(f(x[i], yv));
                 return;
               }
               if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(B)) {  // a broadcast along the run
                 const A xv = *x;
                 for (int64_t i = 0; i < n; ++i) o[i] = Out(f(xv, y[i]));
                 return;
               }
             }
             for (int64_t i = 0; i < n; ++i)
               *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]),
                                                            *reinterpret_cast<const B*>(p[2] + i * s[2]));
           });
}

/// out[i] = f(a[i], b[i], c[i]).
template <class Out, class A, class B, class C, class F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  const Dims& sh = out.shape();
  StridedLoop<4> loop{sh, {byte_strides(out, sh), byte_strides(a, sh), byte_strides(b, sh), byte_strides(c, sh)}};
  loop.run({static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data()),
            static_cast<char*>(c.raw_data())},
           [&](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
             for (int64_t i = 0; i < n; ++i)
               *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]),
                                                            *reinterpret_cast<const B*>(p[2] + i * s[2]),
                                                            *reinterpret_cast<const C*>(p[3] + i * s[3]));
           });
}

}  // namespace attnlab::kernels
/// @}

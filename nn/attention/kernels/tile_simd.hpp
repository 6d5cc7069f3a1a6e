// The AVX-512 pieces both tile micro-kernels share (tile_gemm_f32.cpp, tile_gemm_bf16.cpp): the
// mask of a block's last, partial zmm column, and the block's accumulators zeroed and stored
// (times alpha, added to C when accumulating). Compiled for AVX-512F by a target attribute; the
// bf16 kernel's target includes it, so these inline into both. Include only where
// ATTNLAB_TILE_SIMD is defined (x86-64, GCC 8 or Clang).
#pragma once
#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define ATTNLAB_TILE_SIMD 1
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#define ATTNLAB_TILE_SIMD_INLINE __attribute__((target("avx512f"), always_inline)) inline

namespace attnlab::nn::tile::simd {

// The first n of 16 lanes (all for n >= 16, none for n <= 0).
ATTNLAB_TILE_SIMD_INLINE __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1);
}

template <int MR, int NV>
ATTNLAB_TILE_SIMD_INLINE void zero(__m512 (&c)[MR][NV]) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[i][v] = _mm512_setzero_ps();
}

// C (MR, NV*16 columns, the last zmm masked by `last`) = alpha c, or += alpha c when accumulate.
template <int MR, int NV>
ATTNLAB_TILE_SIMD_INLINE void store(const __m512 (&c)[MR][NV], float alpha, bool accumulate, float* C, int64_t ldc,
                                    __mmask16 last) {
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* dst = C + i * ldc + 16 * v;
      const __mmask16 m = v == NV - 1 ? last : __mmask16(0xffff);
      __m512 x = alpha == 1.0f ? c[i][v] : _mm512_mul_ps(c[i][v], al);
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, dst));
      _mm512_mask_storeu_ps(dst, m, x);
    }
}

}  // namespace attnlab::nn::tile::simd
#endif

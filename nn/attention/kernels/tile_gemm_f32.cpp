// The AVX-512 float32 tile products and the transposed packs (tile_gemm_f32.hpp). Compiled for
// AVX-512 by a target attribute, whatever -march says, and called only after the cpuid check, so
// one binary runs everywhere.
//
// gemm_f32 runs the blocking of tile_blocks.hpp (6 x 64 blocks of C, k in chunks of 64, a chunk
// of B 16 KB) on a micro-kernel of FMAs, one float per lane (tile_gemm_bf16.cpp's has a bf16 pair).
#include "nn/attention/kernels/tile_gemm_f32.hpp"

#include <algorithm>
#include <atomic>

#include "nn/attention/kernels/tile_blocks.hpp"
#include "nn/attention/kernels/tile_simd.hpp"
#include "tensor/error.hpp"
#include "tensor/parallel.hpp"

#ifdef ATTNLAB_TILE_SIMD  // x86-64 and a compiler that knows AVX-512 (tile_simd.hpp)
#define ATTNLAB_TILE_F32 1
// GCC 12's _mm512_setzero_ps and friends read an uninitialised variable by design.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define ATTNLAB_F32_TARGET __attribute__((target("avx512f")))
#endif

namespace attnlab::nn::tile {

namespace {
std::atomic<bool> products_enabled{true};
}  // namespace

void set_f32_tile_products_enabled(bool enabled) { products_enabled.store(enabled, std::memory_order_relaxed); }

int64_t transposed_ld(int64_t n) { return (n + 15) / 16 * 16 + 16; }

#ifdef ATTNLAB_TILE_F32

bool f32_tile_products_available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok && products_enabled.load(std::memory_order_relaxed);
}

namespace {


// C (MR, NV*16 columns, the last zmm holding last_cols) = alpha A B (+ C), k steps.
template <int MR, int NV>
struct Micro {
  ATTNLAB_F32_TARGET static void run(int64_t k, float alpha, const float* A, int64_t sa_i, int64_t sa_p,
                                     const float* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                                     int64_t last_cols) {
    const __mmask16 last = simd::first(last_cols);
    __m512 c[MR][NV];
    simd::zero(c);
    for (int64_t p = 0; p < k; ++p) {
      const float* bp = B + p * ldb;
      __m512 b[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
      const float* ap = A + p * sa_p;
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512 a = _mm512_set1_ps(ap[i * sa_i]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) c[i][v] = _mm512_fmadd_ps(a, b[v], c[i][v]);
      }
    }
    simd::store(c, alpha, accumulate, C, ldc, last);
  }
};

// r[0..15] (16 lanes each) transposed in registers: r[i] holds row i on entry, column i on
// return. Lane-local unpacks, then 128-bit lane shuffles.
ATTNLAB_F32_TARGET inline void transpose16(__m512i r[16]) {
  __m512i a[16];
  for (int i = 0; i < 16; i += 2) {  // a[2k], lane L: rows 2k, 2k+1 at columns 4L, 4L+1; a[2k+1]: at 4L+2, 4L+3
    a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  __m512i b[16];  // b[4g + m], lane L: rows 4g ... 4g+3 at column 4L + m
  for (int g = 0; g < 4; ++g) {
    b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // column 4L + m: lane L of b[m], b[4 + m], b[8 + m], b[12 + m]
    const __m512i lo01 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x44), lo23 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xee);
    const __m512i hi01 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x44);
    const __m512i hi23 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xee);
    r[m] = _mm512_shuffle_i32x4(lo01, hi01, 0x88);
    r[4 + m] = _mm512_shuffle_i32x4(lo01, hi01, 0xdd);
    r[8 + m] = _mm512_shuffle_i32x4(lo23, hi23, 0x88);
    r[12 + m] = _mm512_shuffle_i32x4(lo23, hi23, 0xdd);
  }
}

// out (d, ld) = X^T for n rows of X: blocks of 16 rows x 16 columns transposed in registers.
ATTNLAB_F32_TARGET void transpose_head(const float* X, int64_t sr, int64_t n, int64_t d, float* out, int64_t ld) {
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t nr = std::min<int64_t>(16, n - j0);
    for (int64_t p0 = 0; p0 < d; p0 += 16) {
      const int64_t np = std::min<int64_t>(16, d - p0);
      __m512i r[16];
      for (int64_t jj = 0; jj < 16; ++jj)
        r[jj] = jj < nr ? _mm512_maskz_loadu_epi32(simd::first(np), X + (j0 + jj) * sr + p0) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t p = 0; p < np; ++p) _mm512_mask_storeu_epi32(out + (p0 + p) * ld + j0, simd::first(nr), r[p]);
    }
  }
}

}  // namespace

void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t sa_i, int64_t sa_p, const float* B,
              int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  blocks::gemm<float, Micro>(m, n, k, alpha, A, sa_i, sa_p, B, ldb, accumulate, C, ldc);
}

void transpose_heads(const float* X, int64_t sb, int64_t sh, int64_t sr, int64_t B, int64_t heads, int64_t n,
                     int64_t d, int64_t tile, float* out) {
  const int64_t ld = transposed_ld(std::min(tile, n)), nt = (n + tile - 1) / tile;
  parallel_for(B * heads * nt, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t head = t / nt, kt = t % nt, rows = std::min(tile, n - kt * tile);
      transpose_head(X + head / heads * sb + head % heads * sh + kt * tile * sr, sr, rows, d, out + t * d * ld, ld);
    }
  });
}

#else  // no AVX-512 in this compiler: the products are never available

bool f32_tile_products_available() { return false; }

namespace {
[[noreturn]] void unavailable() {
  fail<ValueError>("tile_attention: the AVX-512 float32 tile products are not built (the compiler lacks AVX-512)");
}
}  // namespace

void gemm_f32(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, bool, float*,
              int64_t) {
  unavailable();
}
void transpose_heads(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*) {
  unavailable();
}

#endif

}  // namespace attnlab::nn::tile

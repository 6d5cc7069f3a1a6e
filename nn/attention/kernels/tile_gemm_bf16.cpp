// The AVX512_BF16 tile products and packs (tile_gemm_bf16.hpp). The functions are compiled for
// AVX512_BF16 by a target attribute, whatever -march says, and called only after the cpuid check,
// so one binary runs everywhere.
//
// gemm_bf16 runs the blocking of tile_blocks.hpp (6 x 64 blocks of C, k in chunks of 64 words)
// on a micro-kernel of vdpbf16ps, which adds the products of a word's two bf16 into each lane.
#include "nn/attention/kernels/tile_gemm_bf16.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "nn/attention/kernels/tile_blocks.hpp"
#include "nn/attention/kernels/tile_gemm_f32.hpp"
#include "nn/attention/kernels/tile_simd.hpp"
#include "tensor/error.hpp"
#include "tensor/parallel.hpp"

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 9) || \
                            (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define ATTNLAB_TILE_BF16 1
#include <immintrin.h>
// GCC 12's _mm512_setzero_ps and friends read an uninitialised variable by design.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define ATTNLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace attnlab::nn::tile {

namespace {
std::atomic<bool> products_enabled{true};
std::atomic<int64_t> min_keys_per_row{128};
}  // namespace

void set_bf16_tile_products_enabled(bool enabled) { products_enabled.store(enabled, std::memory_order_relaxed); }
int64_t bf16_min_keys_per_row() { return min_keys_per_row.load(std::memory_order_relaxed); }
void set_bf16_min_keys_per_row(int64_t keys) { min_keys_per_row.store(keys, std::memory_order_relaxed); }

#ifdef ATTNLAB_TILE_BF16

bool bf16_tile_products_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok && products_enabled.load(std::memory_order_relaxed);
}

namespace {


// C (MR, NV*16 columns, the last zmm holding last_cols) = alpha A B (+ C), k2 words of k.
template <int MR, int NV>
struct Micro {
  ATTNLAB_BF16_TARGET static void run(int64_t k2, float alpha, const uint32_t* A, int64_t sa_i, int64_t sa_p,
                                      const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                                      int64_t last_cols) {
    const __mmask16 last = simd::first(last_cols);
    __m512 c[MR][NV];
    simd::zero(c);
    for (int64_t p = 0; p < k2; ++p) {
      const uint32_t* bp = B + p * ldb;
      __m512bh b[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        b[v] = (__m512bh)(v == NV - 1 ? _mm512_maskz_loadu_epi32(last, bp + 16 * v) : _mm512_loadu_si512(bp + 16 * v));
      const uint32_t* ap = A + p * sa_p;
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(int(ap[i * sa_i]));
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) c[i][v] = _mm512_dpbf16_ps(c[i][v], a, b[v]);
      }
    }
    simd::store(c, alpha, accumulate, C, ldc, last);
  }
};

}  // namespace

void gemm_bf16(int64_t m, int64_t n, int64_t k2, float alpha, const uint32_t* A, int64_t sa_i, int64_t sa_p,
               const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  blocks::gemm<uint32_t, Micro>(m, n, k2, alpha, A, sa_i, sa_p, B, ldb, accumulate, C, ldc);
}

namespace {

// Up to 32 floats of one row as 16 words of bf16 pairs (zero past n).
ATTNLAB_BF16_TARGET inline __m512i row_words(const float* x, int64_t n) {
  const __m512 lo = _mm512_maskz_loadu_ps(simd::first(n), x), hi = _mm512_maskz_loadu_ps(simd::first(n - 16), x + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

}  // namespace

ATTNLAB_BF16_TARGET void pack_pairs_in_rows(const float* X, int64_t ld, int64_t rows, int64_t cols, uint32_t* out,
                                            int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; c += 32) {
      const int64_t n = std::min<int64_t>(32, cols - c);
      _mm512_mask_storeu_epi32(out + i * ldo + c / 2, simd::first((n + 1) / 2), row_words(X + i * ld + c, n));
    }
}

ATTNLAB_BF16_TARGET void pack_pairs_in_rows_t(const float* X, int64_t ld, int64_t rows, int64_t cols, uint32_t* out,
                                              int64_t ldo) {
  // 16 rows at a time: their words (16 x 16, row-major) in L1, then each word column gathered
  // into one 16-word store, so out is written in whole cache lines.
  alignas(64) uint32_t w[16 * 16];
  const __m512i column = _mm512_mullo_epi32(_mm512_set1_epi32(16), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  for (int64_t j0 = 0; j0 < rows; j0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows - j0);
    for (int64_t c = 0; c < cols; c += 32) {
      const int64_t n = std::min<int64_t>(32, cols - c);
      for (int64_t jj = 0; jj < nr; ++jj) _mm512_store_si512(w + 16 * jj, row_words(X + (j0 + jj) * ld + c, n));
      for (int64_t p = 0; p < (n + 1) / 2; ++p)
        _mm512_mask_storeu_epi32(out + (c / 2 + p) * ldo + j0, simd::first(nr),
                                 _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), simd::first(nr),
                                                             _mm512_add_epi32(column, _mm512_set1_epi32(int(p))), w, 4));
    }
  }
}

ATTNLAB_BF16_TARGET void pack_pairs_across_rows(const float* X, int64_t ld, int64_t rows, int64_t cols,
                                                uint32_t* out, int64_t ldo) {
  for (int64_t p = 0; 2 * p < rows; ++p) {
    const float* r0 = X + 2 * p * ld;
    const float* r1 = 2 * p + 1 < rows ? r0 + ld : nullptr;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 m = simd::first(cols - c);
      const __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0 + c)));
      __m512i w = a;
      if (r1) {
        const __m512i b = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1 + c)));
        w = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
      }
      _mm512_mask_storeu_epi32(out + p * ldo + c, m, w);
    }
  }
}

#else  // no AVX512_BF16 in this compiler: the products are never available

bool bf16_tile_products_available() { return false; }

namespace {
[[noreturn]] void unavailable() {
  fail<ValueError>("tile_attention: the bf16 tile products are not built (the compiler lacks AVX512_BF16)");
}
}  // namespace

void gemm_bf16(int64_t, int64_t, int64_t, float, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t, bool,
               float*, int64_t) {
  unavailable();
}
void pack_pairs_in_rows(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { unavailable(); }
void pack_pairs_in_rows_t(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { unavailable(); }
void pack_pairs_across_rows(const float*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { unavailable(); }

#endif

namespace {

std::mutex pool_mutex;
std::vector<std::vector<uint32_t>> pool;  // buffers of dead packs
constexpr size_t kPoolSize = 32;          // more than one forward's and one backward's packs

// A buffer of at least n words, from the pool when one is there (its contents are stale).
std::vector<uint32_t> borrow(size_t n) {
  std::vector<uint32_t> v;
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    if (!pool.empty()) {
      auto best = std::max_element(pool.begin(), pool.end(),
                                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
      v = std::move(*best);
      pool.erase(best);
    }
  }
  if (v.size() < n) v.resize(n);
  return v;
}

}  // namespace

void PackedHeads::give_back() {
  if (words.empty()) return;
  std::lock_guard<std::mutex> lock(pool_mutex);
  if (pool.size() < kPoolSize) pool.push_back(std::move(words));
  words = {};
}

PackedHeads pack_heads(const float* X, int64_t sb, int64_t sh, int64_t sr, int64_t B, int64_t heads, int64_t n,
                       int64_t d, PackKind kind) {
  PackedHeads p;
  p.heads = heads;
  const int64_t d2 = (d + 1) / 2;
  const int64_t rows = kind == PackKind::InRows ? n : kind == PackKind::InRowsT ? d2
                       : kind == PackKind::AcrossRows ? (n + 1) / 2 : n / 2;
  p.ld = kind == PackKind::InRows ? d2 : kind == PackKind::InRowsT ? transposed_ld(n) : d;  // InRowsT: padded, see transposed_ld
  p.per_head = rows * p.ld;
  p.words = borrow(B * heads * p.per_head);
  parallel_for(B * heads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = X + t / heads * sb + t % heads * sh;
      uint32_t* out = p.words.data() + t * p.per_head;
      switch (kind) {
        case PackKind::InRows: pack_pairs_in_rows(x, sr, n, d, out, p.ld); break;
        case PackKind::InRowsT: pack_pairs_in_rows_t(x, sr, n, d, out, p.ld); break;
        case PackKind::AcrossRows: pack_pairs_across_rows(x, sr, n, d, out, p.ld); break;
        case PackKind::AcrossRowsShifted: pack_pairs_across_rows(x + sr, sr, n - 1, d, out, p.ld); break;
      }
    }
  });
  return p;
}

}  // namespace attnlab::nn::tile

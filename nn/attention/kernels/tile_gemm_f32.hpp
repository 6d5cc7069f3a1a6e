/// @file
/// float32 tile products for the fused attention kernel (tile_attention.cpp) on CPUs with
/// AVX-512: C (m, n) = alpha A (m, k) B (k, n) [+ C], read where the kernel keeps its operands.
///
///   A (i, p) at A[i sa_i + p sa_p]   any strides: each element is broadcast, so the score tile P,
///                                    its gradient dS and their transposes are read in place
///   B (p, j) at B[p ldb + j]         rows of 16-float loads: a tile of K or V rows in place, or
///                                    the transposed K and V, packed once per call in panels of a
///                                    key tile (transpose_heads)
///
/// cblas_sgemm packs both operands into panels on every call, and the kernel calls it on every
/// tile pair, so that the packing costs 1/(2 dv) and 1/(2 dk) per FLOP for the tiles P and dS
/// whatever the tile size (docs/performance.md, section 11). These products skip it. The naive
/// twin is the BLAS call the kernel makes without them (and in float64); both sum in float32,
/// in different orders (tests/efficient/test_tile_f32.cpp).
/// @ingroup attention
#pragma once
#include <cstdint>

/// @addtogroup attention
/// @{
namespace attnlab::nn::tile {

/// Whether this build has the AVX-512 products, this CPU runs them (cpuid: avx512f, once) and
/// they are enabled (below).
bool f32_tile_products_available();
/// Whether tile_attention may use them for float32 (default true, process-wide). Off, the kernel
/// calls cblas_sgemm, as it does in float64: tests compare the two, benchmarks time them.
void set_f32_tile_products_enabled(bool enabled);

/// C (m, n; ldc) = alpha A B, or C += alpha A B when accumulate (A, B as in the file's comment).
/// Call only when f32_tile_products_available().
void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t sa_i, int64_t sa_p, const float* B,
              int64_t ldb, bool accumulate, float* C, int64_t ldc);

/// The row stride of a transposed panel of n columns (floats, or the bf16 pairs of
/// tile_gemm_bf16.hpp): n rounded up to 16, plus 16. A stride
/// of a power of two (1 KB for 256 keys) would put the panel's rows in fewer L1 sets than its
/// rows need; one extra cache line per row spreads them.
int64_t transposed_ld(int64_t n);

/// X^T per head in panels of `tile` rows of X: for every (b, h) and key tile kt, a (d, ld) panel
/// of the tile's rows transposed, ld = transposed_ld(min(tile, n)); panels of one head follow each other:
///   out[(((b heads + h) nt + kt) d + p) ld + jj] = X[b sb + h sh + (kt tile + jj) sr + p]
/// for rows kt tile + jj < n, nt = ceil(n / tile) panels per head (X's rows contiguous, n rows of
/// d floats). A tile product reads its key tile's panel as one contiguous block.
void transpose_heads(const float* X, int64_t sb, int64_t sh, int64_t sr, int64_t B, int64_t heads, int64_t n,
                     int64_t d, int64_t tile, float* out);

}  // namespace attnlab::nn::tile
/// @}

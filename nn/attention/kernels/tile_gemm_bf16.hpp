/// @file
/// bfloat16 tile products for the fused attention kernel (tile_attention.cpp) under autocast:
/// C (m, n) float32 = alpha A (m, k) B (k, n) [+ C], A and B rounded to bf16 (nearest even) and
/// multiplied by the AVX512_BF16 instruction vdpbf16ps, which adds two bf16 products into each
/// float32 lane; the sums stay float32. Runs only where the CPU has AVX512_BF16
/// (bf16_tile_products_available(); attnlab's cpu_has_native_bf16 also accepts AMX, which this
/// kernel does not use) and the compiler knows the instructions (GCC 10, Clang 9).
///
/// The operands are 32-bit words, each a pair of bf16 values consecutive along k (the lower half
/// the even k), since that is what the instruction reads:
///   A word (i, p) = (A[i][2p], A[i][2p+1]) at A[i sa_i + p sa_p]   (broadcast: any strides)
///   B word (p, j) = (B[2p][j], B[2p+1][j]) at B[p ldb + j]         (16 columns per load)
/// The pack functions make them from float32 matrices X (rows, cols; row stride ld); an odd k is
/// padded with a zero.
///   pack_pairs_in_rows X as the A of X @ ...:          word (i, p) = (X[i][2p], X[i][2p+1]), (rows, ceil(cols/2))
///   pack_pairs_in_rows_t X as the B of ... @ X^T:      word (p, j) = (X[j][2p], X[j][2p+1]), (ceil(cols/2), rows)
///   pack_pairs_across_rows X as the B of ... @ X, or,  word (p, j) = (X[2p][j], X[2p+1][j]), (ceil(rows/2), cols)
///     read with sa_i = 1, sa_p = cols, as the A of X^T @ ...
/// The naive twin of every product is a float32 product of the bf16-rounded operands
/// (tests/efficient/test_tile_bf16.cpp); the two differ only in the order of float32 sums.
/// @ingroup attention
#pragma once
#include <cstdint>
#include <vector>

/// @addtogroup attention
/// @{
namespace attnlab::nn::tile {

/// Whether this build has the AVX512_BF16 products, this CPU runs them (cpuid, once) and they are
/// enabled (below).
bool bf16_tile_products_available();
/// Whether tile_attention may use them under autocast (default true, process-wide). Benchmarks
/// turn them off to measure the kernel's share of a bf16 step (bench_bf16_lm).
void set_bf16_tile_products_enabled(bool enabled);

/// The size rule: tile_attention runs the bf16 products only when its query rows have on average
/// at least this many allowed keys (default 128). The packing of q, k, v and dO costs O((N + M) d)
/// per call against O(pairs d) of products, so rows of few keys (narrow local windows) would pay
/// more for it than bf16 saves; 128 is the smallest average measured (docs/performance.md,
/// section 11: the reference LM, causal N = 256, where the kernel in bf16 is even with float32 or
/// ahead within the noise). Tests change it to run either path on small problems.
int64_t bf16_min_keys_per_row();
/// Sets the size rule's average (process-wide, for every later call; not checked: 0 or less lets
/// every problem use the bf16 products, a value above the keys a row can have lets none).
void set_bf16_min_keys_per_row(int64_t keys);

/// C (m, n; ldc) = alpha A B, or C += alpha A B when accumulate; k2 = ceil(k / 2) words along k.
/// Call only when bf16_tile_products_available().
void gemm_bf16(int64_t m, int64_t n, int64_t k2, float alpha, const uint32_t* A, int64_t sa_i, int64_t sa_p,
               const uint32_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc);

/// out (rows, ceil(cols / 2)), row stride ldo: word (i, p) = (X[i][2p], X[i][2p+1]).
void pack_pairs_in_rows(const float* X, int64_t ld, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo);
/// out (ceil(cols / 2), rows), row stride ldo: word (p, j) = (X[j][2p], X[j][2p+1]).
void pack_pairs_in_rows_t(const float* X, int64_t ld, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo);
/// out (ceil(rows / 2), cols), row stride ldo: word (p, j) = (X[2p][j], X[2p+1][j]) (0 past the last row).
void pack_pairs_across_rows(const float* X, int64_t ld, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo);

/// One of the packs above for every (b, head) of a (B, heads, n, d) float32 tensor whose element
/// (b, h, i, e) is at X[b sb + h sh + i sr + e]; made in parallel over (b, head).
enum class PackKind {
  InRows,            ///< (n, ceil(d/2)) words per head: A of X @ ...
  InRowsT,           ///< (ceil(d/2), ld), ld = transposed_ld(n) (tile_gemm_f32.hpp): B of ... @ X^T
  AcrossRows,        ///< (ceil(n/2), d): B of ... @ X from an even row
  AcrossRowsShifted  // (ceil((n-1)/2), d), pairs (1, 2), (3, 4), ...: B of ... @ X from an odd row
};
/// The words live in a buffer borrowed from a process-wide pool and returned when the pack dies:
/// a fresh buffer of this size is an mmap whose pages fault in (and are zeroed) on every call.
struct PackedHeads {
  /// The packs of every (b, head), (b, h)'s at (b heads + h) per_head; from the pool, so it may be
  /// longer than B heads per_head words, and the words past those are stale.
  std::vector<uint32_t> words;
  int64_t heads = 0;     ///< the heads per batch element of the packed tensor
  int64_t per_head = 0;  ///< words per (b, head): rows x ld
  int64_t ld = 0;        ///< words per row of a head's pack
  /// Word row `row` of head (b, h).
  const uint32_t* at(int64_t b, int64_t h, int64_t row) const { return words.data() + (b * heads + h) * per_head + row * ld; }

  PackedHeads() = default;
  /// Takes `o`'s buffer; `o` is left empty and gives nothing back.
  PackedHeads(PackedHeads&& o) noexcept = default;
  /// Gives this pack's buffer back to the pool, then takes `o`'s words and sizes.
  PackedHeads& operator=(PackedHeads&& o) noexcept {
    give_back();
    words = std::move(o.words), heads = o.heads, per_head = o.per_head, ld = o.ld;
    return *this;
  }
  ~PackedHeads() { give_back(); }

 private:
  void give_back();
};
/// Packs every (b, head) of the (B, heads, n, d) float32 tensor X (element (b, h, i, e) at
/// X[b sb + h sh + i sr + e]; d contiguous) as `kind` says, in parallel over the B heads pairs:
/// InRows gives (n, ceil(d/2)) words per head, InRowsT (ceil(d/2), ld) with ld = transposed_ld(n), AcrossRows (ceil(n/2), d),
/// AcrossRowsShifted (n/2, d) from row 1. Call only when bf16_tile_products_available(): in a build
/// without the AVX512_BF16 products it throws ValueError (when B heads > 0).
PackedHeads pack_heads(const float* X, int64_t sb, int64_t sh, int64_t sr, int64_t B, int64_t heads, int64_t n,
                       int64_t d, PackKind kind);

/// The words of rows [j, ...) of X as B of ... @ X, from the even pack or the shifted one.
inline const uint32_t* rows_from(const PackedHeads& even, const PackedHeads& odd, int64_t b, int64_t h, int64_t j) {
  return j % 2 == 0 ? even.at(b, h, j / 2) : odd.at(b, h, (j - 1) / 2);
}

}  // namespace attnlab::nn::tile
/// @}

/// @file
/// Tiled ("flash") attention over a sparse pattern: the kernel behind mha's fused path, the
/// positional patterns (local, sparse_strided, sparse_fixed, dilated; docs/attention.md, "local" to
/// "dilated") and the options of current models ("Options of current models"). One
/// differentiable op with a hand-written backward, after Dao et al. 2022 (FlashAttention) and
/// Dao 2023 (FlashAttention-2):
///
///   forward, per (batch b, head h, query tile):    for each key tile the pattern can touch
///     S = scale * Q_t K_c^T                   (BLAS; head h reads kv head h / (h/g))  // (TQ, TK)
///     S -= slope_h |q_pos - k_pos|            (alibi)
///     S = c tanh(S / c)                       (softcap)
///     S[i, j] = -inf where the rule disallows (i, j)
///     softmax, online: m_i <- max(m_i, max_j S), l_i <- l_i e^(m_old - m_new) + sum_j e^(S - m_new),
///                      acc_i <- acc_i e^(m_old - m_new) + (e^(S - m_new) * Z) V_c    (BLAS)
///              starting from m_i = -inf, l_i = 0, or with a sink from m_i = sink_h, l_i = 1;
///       O_i = acc_i / l_i,  lse_i = m_i + log l_i  (a row with no allowed key and no sink: O_i = 0, lse_i = -inf)
///     sigmoid: P = sigmoid(S + bias) on allowed entries, acc_i += (P * Z) V_c, O_i = acc_i (no normaliser)
///     softpick: running c_i = max(0, row max) from 0; e = e^(S - c_i) - e^(-c_i) on allowed entries,
///              l_i += |e|, acc_i += (relu(e) * Z) V_c, both rescaled by e^(c_old - c_new) as c_i grows;
///              O_i = acc_i / (l_i + eps), saved L_i = c_i + log(l_i + eps) and c_i
///   backward, from the saved lse (no probabilities kept), D_i = rowsum(dO_i * O_i) - dlse_i:
///     P = e^(S - lse);  dP = (dO V^T) * Z;  dS = P * (dP - D)    (sigmoid: dS = dP * P (1 - P);
///       softpick: dS = e^(S - L) (dP [S > 0] - D sign(S)), and -D eps e^(c - L) at the row max when c > 0)
///     dS *= 1 - (S / c)^2                                         (softcap)
///     dQ += scale dS K  (pass 1: parallel over (b, h, query tile))
///     dV += (P * Z)^T dO,  dK += scale dS^T Q  (pass 2: parallel over (b, kv head, key tile), looping
///                                              over the group's query heads and the transposed tile
///                                              list inside the task, so no two tasks write one row)
///     d sink_h = -sum_{b, i} e^(sink_h - lse_i) D_i
/// Z is the attention-dropout multiplier (keep / (1 - rate), or 1). Nothing of size N x M is
/// ever allocated: scratch is a few tiles per task; saved for backward are q, k, v, O, lse.
///
/// The pattern is data, not code: query row i may attend key rows [lo[i], hi[i]) minus
/// [ex_lo[i], ex_hi[i]), and the user's bool mask read at the raw positions (q_pos[i], k_pos[j])
/// through its broadcast strides, and with segment ids (packed sequences) only keys whose id equals
/// the query's, per batch row; a tile pair whose id ranges do not meet is skipped (docs/attention.md,
/// "Packed sequences"). Causality is folded into hi by whoever builds the pattern.
/// Patterns that are not contiguous bands are made so by gathering rows (index_select) before
/// the call; parts with different key sets are merged exactly by their log-sum-exps, which the
/// op can return as a differentiable output (need_lse).
///
/// Mixed precision: float32 inputs inside an AutocastGuard(kBFloat16) scope (autograd/autocast.hpp),
/// on a CPU with AVX512_BF16, run all six products (S = Q K^T, P V; dP = dO V^T, dV, dQ, dK) in
/// bf16 with float32 sums (tile_gemm_bf16.hpp): the operands are rounded to bf16 once per call
/// (q, k, v, dO) or per tile (P, dS). Scores, the online softmax statistics, lse, D and every
/// output and gradient stay float32; the backward follows its forward. Without AVX512_BF16, with an
/// odd q_tile, float64, or rows of fewer keys than tile::bf16_min_keys_per_row() on average (the
/// size rule, tile_gemm_bf16.hpp) the call runs in float32; tile_attention_runs_bf16 checks the rest.
///
/// tile_attention_reference is the naive twin: the same pattern densified by plain loops into
/// an (N, M) mask and attention composed from autograd primitives. It is the tests' oracle.
/// @ingroup attention
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// Which keys each query row may attend, in the kernel's coordinates (row i of q, row j of k).
struct TilePattern {
  std::vector<int64_t> lo;     ///< (N): row i may attend keys [lo[i], hi[i]) ...
  std::vector<int64_t> hi;     ///< (N): see lo
  std::vector<int64_t> ex_lo;  ///< (N) or empty with ex_hi: ... except [ex_lo[i], ex_hi[i])
  std::vector<int64_t> ex_hi;  ///< (N) or empty: see ex_lo
  std::vector<int64_t> q_pos;         ///< (N) or empty (= i): the raw position n of row i
  std::vector<int64_t> k_pos;         ///< (M) or empty (= j): the raw position m of key row j
  Tensor mask;  ///< bool, broadcastable to (B, h, n_raw, m_raw), true = may attend; read at (q_pos, k_pos)
  /// Packed sequences (docs/attention.md, "Packed sequences"): int64 (B, n_raw) and (B, m_raw) segment
  /// ids, both defined or both undefined; entry (i, j) of batch row b is allowed only when
  /// q_segments[b, q_pos[i]] == k_segments[b, k_pos[j]]. A (query tile, key tile) pair whose id
  /// ranges do not meet in batch row b is skipped, so no (N, M) mask is ever built.
  Tensor q_segments;
  Tensor k_segments;  ///< see q_segments
};

/// Every key for every query (keys m <= n when causal), with the user's mask: the pattern of
/// plain softmax attention (the fused paths of mha and mla).
/// segment_ids (B, n), when given, become both q_segments and k_segments (self-attention).
TilePattern dense_tile_pattern(int64_t n, int64_t m, bool causal, const Tensor& mask, const Tensor& segment_ids = {});

/// The score function the kernel applies to each row of scores.
enum class TileScore { Softmax, Sigmoid, Softpick };

/// The options of tile_attention: scale, dropout, tile sizes and the options of current models.
struct TileOptions {
  double scale = 0;       ///< scores are scale * q . k; 0 means 1/sqrt(dk)
  double dropout = 0;     ///< attention dropout rate on the probabilities, in [0, 1)
  uint64_t seed = 0;      ///< dropout: element (b, h, n, m) is kept iff tile_dropout_keep(...)
  bool need_lse = false;  ///< also return lse as a differentiable output
  /// Tile sizes. At dk = 64 the BLAS products on 128 x 256 tiles ran about 15% faster (forward)
  /// and 10% (forward + backward) than on 64 x 64 (CPU time, one thread, N = 2048; bench/bench_attention).
  int64_t q_tile = 128;   ///< rows per query tile
  int64_t k_tile = 256;   ///< rows per key tile
  /// The options of current models (docs/attention.md, "Options of current models").
  std::vector<double> alibi;  ///< (h) ALiBi slopes: score -= slope_h |q_pos - k_pos|; empty = off
  double softcap = 0;         ///< c > 0: score = c tanh(score / c) after ALiBi; 0 = off
  TileScore score = TileScore::Softmax;  ///< the score function
  double sigmoid_bias = 0;    ///< b of TileScore::Sigmoid: P = sigmoid(score + b)
  double softpick_eps = 1e-6; ///< eps of TileScore::Softpick
  Tensor sinks;               ///< (h) sink logits in each softmax row's denominator, differentiable; undefined = none
};

/// What tile_attention returns: the output and, when asked for, the log-sum-exps.
struct TileAttentionResult {
  Tensor out;  ///< (B, h, N, dv)
  Tensor lse;  ///< (B, h, N) log sum_j exp(score) over the allowed keys (and the sink), -inf for an empty row; need_lse only
};

/// q (B, h, N, dk), k (B, g, M, dk), v (B, g, M, dv) with g dividing h (query head i reads key/value
/// head i / (h/g)), float32 or float64, any strides. Differentiable in q, k, v, options.sinks (and
/// through lse when need_lse; with sinks lse includes the sink; sigmoid and softpick have no lse).
TileAttentionResult tile_attention(const Tensor& q, const Tensor& k, const Tensor& v, const TilePattern& pattern,
                                   const TileOptions& options = {});

/// The naive twin: dense scores, the pattern as an (N, M) mask, softmax and products composed from
/// autograd ops. Same inputs and outputs (lse always returned). O(N M) memory: tests only.
TileAttentionResult tile_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const TilePattern& pattern, const TileOptions& options = {});

/// The pattern (and its mask and segment ids) as a dense bool tensor (B|1, h|1, N, M) in kernel
/// coordinates, by plain loops. `batch`, `heads` are the sizes the mask is broadcast against.
Tensor tile_pattern_dense(const TilePattern& pattern, int64_t n, int64_t m, int64_t batch, int64_t heads);

/// Whether tile_attention called now on `dtype` inputs with `options` runs its products in bf16 where
/// the size rule allows: float32, an engaged autocast scope on this thread, even q_tile, AVX512_BF16.
bool tile_attention_runs_bf16(DType dtype, const TileOptions& options = {});

/// The number of (batch row, head, query tile, key tile) blocks that tile_attention's forward passes
/// have computed since the program started: tests read it before and after a call to check that
/// tiles across segments are skipped.
int64_t tile_attention_forward_blocks();

/// The attention-dropout draw: whether element (b, h, n, m) (raw positions) survives at `rate`.
/// A counter-based hash, so backward recomputes exactly the forward's draws without storing them.
inline uint64_t tile_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
/// The dropout key of row (b, h, n), shared by its keys m.
inline uint64_t tile_dropout_row_key(uint64_t seed, int64_t b, int64_t h, int64_t n) {
  return tile_mix64(tile_mix64(tile_mix64(seed + uint64_t(b)) + uint64_t(h)) + uint64_t(n));
}
/// Whether key m of a row with key `row_key` is kept at dropout `rate`.
inline bool tile_dropout_keep_key(uint64_t row_key, int64_t m, double rate) {
  return double(tile_mix64(row_key + uint64_t(m)) >> 11) * 0x1.0p-53 >= rate;
}
/// Whether element (b, h, n, m) is kept at dropout `rate` under `seed`: a pure function, so a
/// backward or another tile redraws the same mask.
inline bool tile_dropout_keep(uint64_t seed, int64_t b, int64_t h, int64_t n, int64_t m, double rate) {
  return tile_dropout_keep_key(tile_dropout_row_key(seed, b, h, n), m, rate);
}

}  // namespace attnlab::nn
/// @}

/// @file
/// `longformer` (Beltagy, Peters, Cohan 2020, "Longformer: The Long-Document Transformer";
/// docs/attention.md, "longformer"): a dilated sliding window plus global positions.
///
///   allowed[n, m] = n in G  or  m in G  or  (|n - m| <= w*d  and  (n - m) mod d == 0)
///   (and m <= n when causal, and the user's mask)
///
/// With separate_global the rows n in G use their own projections q_global, k_global, v_global
/// against every key; the other rows use q_proj/k_proj/v_proj for all their keys, G included.
///
/// Two paths compute the same function. Without need_weights (training, inference) the fused
/// path runs the pattern as disjoint tile_attention parts merged by log-sum-exp (patterns.hpp):
///   window   the dilated band, minus the global keys, for the non-global rows     O(N w)
///   keys     the global keys (m <= n when causal), for the non-global rows        O(N G)
///   rows     the global rows against every key (their own projections with separate_global) O(G M)
/// so no score tensor is kept: memory O(B h (N + M) (dk + dv)). With need_weights the gathered-
/// block core below (the composed twin) runs and also returns the densified probabilities.
///
/// This header also owns the gathered-block core that `bigbird` shares (the formulation of the
/// BigBird and Longformer reference code): queries are grouped into blocks of b rows; each block
/// gathers the S keys its rows may need into (B, h, blocks, S, d) with index_select, scores are
/// one batched matmul (B, h, blocks, b, S), the exact element-level rule is a bool mask over those
/// gathered scores, and one softmax per query row runs over the gathered keys plus the global
/// keys. Global query rows are a small dense (rows x M) computation. Cost O(N (S + G)) instead of
/// O(N M); no N x M tensor exists unless the densified probabilities are requested.
/// @ingroup attention
#pragma once
#include <vector>

#include "nn/attention/patterns.hpp"
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// A sparse pattern in gathered-block form. Invariants (checked by block_attention):
/// every query position < n that is not a global row appears exactly once in `query`; key
/// positions in `key` are < m, distinct within a block's list, and never in `global_keys`, so
/// no key is counted twice in a row's softmax.
struct BlockPattern {
  int64_t n = 0;                 ///< query length
  int64_t m = 0;                 ///< key length
  int64_t blocks = 0;            ///< query blocks
  int64_t rows = 0;              ///< rows per block (b)
  int64_t slots = 0;             ///< gathered keys per block (S)
  int64_t key_heads = 1;         ///< 1, or h when each head gathers other keys (bigbird's random blocks)
  int64_t max_distance = -1;     ///< element rule on gathered keys: |n - m| <= max_distance (-1: none)
  std::vector<int64_t> query;        ///< (blocks, rows): query position of each block row, -1 = padding
  std::vector<int64_t> key;          ///< (key_heads, blocks, slots): key position of each slot, -1 = none
  std::vector<int64_t> global_keys;  ///< seen by every block row, after its gathered keys
  std::vector<int64_t> global_rows;  ///< query rows computed densely against every key
};

/// The projected heads block_attention attends with, and the global rows' own inputs.
struct BlockInputs {
  Tensor q;  ///< (B, h, N, dk), already scaled
  Tensor k;  ///< (B, h, M, dk)
  Tensor v;  ///< (B, h, M, dv)
  /// What the global rows use: q_rows (B, h, R, dk) scaled, for pattern.global_rows in order,
  /// against k_rows (B, h, M, dk) and v_rows (B, h, M, dv). Undefined: rows of q, and k, v.
  Tensor q_rows;
  Tensor k_rows;  ///< see q_rows
  Tensor v_rows;  ///< see q_rows
};

/// What block_attention returns.
struct BlockResult {
  Tensor o;          ///< (B, h, N, dv)
  Tensor attention;  ///< (B, h, N, M) densified probabilities (no gradient), with need_weights
};

/// Softmax attention over the pattern, with `mask` (bool, broadcastable to (B, h, N, M)) read at
/// the gathered positions, m <= n when causal, and attention dropout in train mode.
BlockResult block_attention(const BlockPattern& pattern, const BlockInputs& in, const Tensor& mask, bool causal,
                            double dropout, bool training, Generator& gen, bool need_weights, const char* variant);

// ---- longformer ----

/// The options of `longformer` beside the head options (see the file's description).
struct LongformerConfig {
  int64_t window = 64;                 ///< w
  int64_t dilation = 1;                ///< d
  std::vector<int64_t> global;         ///< global=...: sorted, distinct positions
  bool global_list = false;            ///< given as global=... (else global_first)
  int64_t global_first = 1;            ///< global_first=g: positions 0 .. g-1
  bool separate_global = false;        ///< global rows use their own projections (q_global, ...)
};

/// The `longformer` variant: a dilated sliding window plus global positions (see the file's description).
class Longformer : public ProjectedAttention {
 public:
  Longformer(int64_t d_model, const HeadConfig& heads, const LongformerConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "Longformer"; }

  /// The gathered-block form of the pattern for N queries and M keys (public for tests).
  BlockPattern pattern(int64_t n, int64_t m, bool causal) const;
  /// The fused path's parts for N queries and M keys: window, global keys, global rows (the
  /// last two only when there are global positions in range); q, k, v of the parts left undefined.
  std::vector<PatternPart> parts(int64_t n, int64_t m, bool causal) const;
  /// The global positions in range: rows (< N) and keys (< N and < M), sorted.
  std::vector<int64_t> global_rows(int64_t n) const;

  LongformerConfig options;  ///< the options the layer was built from
  std::shared_ptr<Linear> q_global;  ///< null unless separate_global
  std::shared_ptr<Linear> k_global;  ///< null unless separate_global
  std::shared_ptr<Linear> v_global;  ///< null unless separate_global

 private:
  /// Packed sequences on the fused parts (global rows and keys included); need_weights takes the
  /// dense segment mask (the composed twin).
  AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                   bool need_weights) override;
  AttentionResult forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool need_weights,
                               const Tensor& segment_ids);

 protected:
  Tensor prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                      const std::vector<int64_t>& keep) const override;
};

}  // namespace attnlab::nn
/// @}

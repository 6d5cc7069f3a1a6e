/// @file
/// The fixed positional sparsity patterns of docs/attention.md ("local" to "dilated"), on the MHA
/// projections:
///
///   local(window=w, sink_tokens=s)   allowed iff |n - m| <= w or m < s   (sinks: Xiao et al. 2024)
///   sparse_strided(stride=l)         allowed iff |n - m| < l or (n - m) mod l == 0   (Child et al. 2019)
///   sparse_fixed(block=l, summary=c) allowed iff n div l == m div l or m mod l >= l - c   (Child et al. 2019)
///   dilated(window=w, dilation=d)    allowed iff |n - m| <= w d and (n - m) mod d == 0
///
/// plus causal (m <= n) and the user's mask, on raw indices n < N, m < M (cross-attention too).
/// None of them builds an N x M tensor: each pattern is cut into disjoint parts that are
/// contiguous key ranges per query row after gathering rows (tile_attention.hpp), and parts are
/// merged exactly by their log-sum-exps:
///
///   local           one part, the band; with sinks the band runs from key 0 with the gap
///                   between the sinks and the window excluded (ex_lo, ex_hi)  O(N (w + s))
///   dilated         positions grouped by n mod d (index_select), then a band of width w in each group
///                                                                           O(N w)
///   sparse_strided  the band |n - m| < l, plus dense attention inside each residue class mod l
///                   with m != n                                             O(N (l + N/l))
///   sparse_fixed    the own block, plus the gathered summary columns outside it
///                                                                           O(N (l + c N/l))
///
/// The part/merge machinery (PatternPart, attend_parts, dilated_band) is public: `longformer`
/// runs its window and global positions on it too (longformer.hpp).
/// @ingroup attention
#pragma once
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// One part of a pattern: kernel row i is query q_rows[i] (raw position), key row j is key
/// k_rows[j]; empty = all positions in order. q_rows, when given, holds distinct positions; the
/// queries it leaves out get nothing from this part (zero output, lse -inf).
struct PatternPart {
  std::vector<int64_t> q_rows;  ///< raw query position of each kernel row; empty = all in order
  std::vector<int64_t> k_rows;  ///< raw key position of each kernel row; empty = all in order
  TilePattern pattern;  ///< lo, hi, ex_lo, ex_hi in kernel coordinates, causality folded in
  int64_t tile = 64;    ///< query and key tile size for this part
  /// This part's own inputs, already in kernel rows: q (B, h, |q_rows|, dk), k (B, h, |k_rows|, dk),
  /// v (B, h, |k_rows|, dv). Undefined: rows gathered from the shared q, k, v of attend_parts.
  /// (longformer's separate_global rows use other projections.)
  Tensor q;
  Tensor k;  ///< see q
  Tensor v;  ///< see q
  /// The other parts give this part's queries no key: their rows take its output as it is, with
  /// no lse and no merge (longformer's global rows). Needs q_rows.
  bool alone = false;
};

/// Softmax attention over the union of disjoint parts, in position order: each part on
/// tile_attention, then the parts merged exactly by their log-sum-exps. q (B, h, N, dk),
/// k (B, h, M, dk), v (B, h, M, dv); `mask` bool broadcastable to (B, h, N, M) on raw positions;
/// options.dropout/seed are shared by the parts (the draws are keyed by raw (b, h, n, m), so the
/// parts together are one dropout). Parts that allow nothing are skipped; `alone` parts replace
/// their rows after the merge (checked: no other part gives those rows a key).
/// segment_ids (B, N), when given, limit each query to the keys of its segment (self-attention;
/// docs/attention.md, "Packed sequences"). Returns (B, h, N, dv); rows no part allows are zero.
Tensor attend_parts(std::vector<PatternPart>& parts, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& mask, TileOptions options, const char* variant, const Tensor& segment_ids = {});

/// The dilated band |n - m| <= w d and (n - m) mod d == 0 (causal: also m <= n) for n < N queries
/// and m < M keys, without the keys in `skip_keys` (sorted, distinct, < M) and giving no key to
/// the queries n with skip_queries[n] (empty: none). d = 1 keeps identity positions when each
/// row's skipped keys are one run of consecutive positions (cut off lo/hi or one exclusion
/// range); otherwise keys (and for d > 1 queries) are regrouped by position mod d with the
/// skipped keys left out, inside which the window is one contiguous range of key rows.
PatternPart dilated_band(int64_t n, int64_t m, int64_t window, int64_t dilation, bool causal,
                         const std::vector<int64_t>& skip_keys = {}, const std::vector<char>& skip_queries = {});

/// The base of the fixed positional patterns (local, strided, fixed, dilated) on the MHA projections.
class PatternAttention : public ProjectedAttention {
 public:
  /// need_weights densifies the probabilities (B, h, N, M): small inputs only.
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;

  /// The documented rule for query n and key m (causality and the mask aside), written plainly.
  virtual bool allows(int64_t n, int64_t m) const = 0;

  using Part = PatternPart;  ///< one part of the pattern
  /// Disjoint parts whose union is the pattern, for N queries and M keys.
  virtual std::vector<Part> parts(int64_t n, int64_t m, bool causal) const = 0;

 protected:
  PatternAttention(std::string variant, int64_t d_model, const HeadConfig& config);  ///< the MHA projections of `variant`
  /// Packed sequences: the segment ids go to every part's tile_attention (no (N, N) mask).
  AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                   bool need_weights) override;

 private:
  AttentionResult forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool need_weights,
                               const Tensor& segment_ids);
};

/// The `local` variant: a sliding window of keys around each query, with a rolling window for decoding.
class LocalAttention : public PatternAttention {
 public:
  LocalAttention(int64_t d_model, const HeadConfig& config, int64_t window, int64_t sink_tokens = 0);  ///< queries attend keys with |n - m| <= window, plus the first sink_tokens keys
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)
  bool allows(int64_t n, int64_t m) const override;
  std::vector<Part> parts(int64_t n, int64_t m, bool causal) const override;
  std::string type_name() const override { return "LocalAttention"; }
  /// The sink positions [0, s) and a rolling window of the last `window` positions after them:
  /// B h min(length, s + window) (dk + dv) numbers whatever the length (max_len is not needed).
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;
  int64_t window;  ///< w: |n - m| <= w
  int64_t sink_tokens;  ///< s: keys 0..s-1 are attended by every query (causal: by those at n >= m)

 protected:
  void own_options(OptionValues& values) const override;
};

/// The `sparse_strided` variant: |n - m| < l or (n - m) mod l == 0 (Child et al. 2019).
class StridedSparseAttention : public PatternAttention {
 public:
  StridedSparseAttention(int64_t d_model, const HeadConfig& config, int64_t stride);  ///< l = stride
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)
  bool allows(int64_t n, int64_t m) const override;
  std::vector<Part> parts(int64_t n, int64_t m, bool causal) const override;
  std::string type_name() const override { return "StridedSparseAttention"; }
  int64_t stride;  ///< l

 protected:
  void own_options(OptionValues& values) const override;
};

/// The `sparse_fixed` variant: its own block of l, plus the last c of every block (Child et al. 2019).
class FixedSparseAttention : public PatternAttention {
 public:
  FixedSparseAttention(int64_t d_model, const HeadConfig& config, int64_t block, int64_t summary);  ///< l = block, c = summary
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)
  bool allows(int64_t n, int64_t m) const override;
  std::vector<Part> parts(int64_t n, int64_t m, bool causal) const override;
  std::string type_name() const override { return "FixedSparseAttention"; }
  int64_t block;    ///< l
  int64_t summary;  ///< c

 protected:
  void own_options(OptionValues& values) const override;
};

/// The `dilated` variant: a dilated sliding window.
class DilatedAttention : public PatternAttention {
 public:
  DilatedAttention(int64_t d_model, const HeadConfig& config, int64_t window, int64_t dilation);  ///< w = window, d = dilation
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)
  bool allows(int64_t n, int64_t m) const override;
  std::vector<Part> parts(int64_t n, int64_t m, bool causal) const override;
  std::string type_name() const override { return "DilatedAttention"; }
  int64_t window;    ///< w
  int64_t dilation;  ///< d

 protected:
  void own_options(OptionValues& values) const override;
};

}  // namespace attnlab::nn
/// @}

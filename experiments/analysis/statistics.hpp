/// @file
/// Attention statistics over a data set, head roles and their tables and heatmaps
/// (docs/analysis.md). Memory-bounded: each batch's maps are reduced to running sums per
/// (layer, head) and dropped; only the first K examples' full maps are kept.
///
///   confidence (Voita et al. 2019): mean over queries of the head's maximum attention weight;
///   positional role: >= 90% of the queries' maximum weights at one relative offset m - n;
///   structural role (ListOps): the share of tokens whose maximum weight is on the opening token
///     of their enclosing operator, at least 10 points above the best fixed-offset baseline (the
///     share of those tokens whose enclosing operator sits at the most common offset);
///   rare-token role (char LM): mean attention mass on the rarest visible tokens >= 0.5 and at
///     least 10 points above what uniform attention would put there;
///   retrieval role (associative recall, `k1 v1 ... kP vP q`): mean weight from the query
///     position q on the position of the answer (the value v_j after the key k_j == q) >= 0.5
///     and at least 10 points above uniform attention (1 / the keys the query sees);
///   previous-token and induction roles (token models): scores on repeated random sequences
///     (circuits.hpp), >= 0.5 and at least 10 points above uniform attention.
/// @ingroup analysis
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "experiments/analysis/circuits.hpp"
#include "experiments/analysis/probe.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

/// What AttentionStats measures beside the always-on statistics.
struct StatsConfig {
  int64_t keep_examples = 4;            ///< K: full maps kept for the first K examples
  std::vector<int64_t> token_class;     ///< token id -> class index; empty: no class masses
  std::vector<std::string> class_names; ///< one per class
  bool listops_structure = false;       ///< structural statistics from ListOps token ids
  bool rare_tokens = false;             ///< rare-token statistics
  std::vector<double> token_frequency;  ///< corpus count per id; empty: counts within each sequence
  int64_t recall_keys = 0;              ///< associative recall: key ids are [0, recall_keys); > 0
                                        ///< measures the retrieval role
};

/// The running statistics of one head's attention maps over the examples seen.
struct HeadStats {
  double confidence_sum = 0;                  ///< sum over queries of max_m p[n, m]
  int64_t queries = 0;                        ///< queries with at least 2 keys to choose from
  std::map<int64_t, int64_t> argmax_offsets;  ///< m* - n -> count (m* = argmax_m p[n, m])
  std::vector<double> class_mass;             ///< per token class: sum over queries of the mass on it
  int64_t structural_hits = 0;                ///< queries whose m* is their enclosing operator
  double rare_mass = 0;                       ///< sum over rare-token queries of the mass on the rarest
  double retrieval_mass = 0;                  ///< sum over recall examples of p[query, answer]
};

/// The statistics of one layer: per head, and the kept maps.
struct LayerStats {
  std::vector<HeadStats> heads;  ///< one per head
  std::vector<Tensor> kept;  ///< the first K examples' maps, each (h, N, N)
};

/// Everything AttentionRecorder measured over the examples.
struct AttentionStats {
  std::vector<LayerStats> layers;  ///< one per layer
  int64_t examples = 0;  ///< examples seen
  std::vector<std::vector<int64_t>> kept_tokens;  ///< axis tokens of the kept examples
  int64_t structural_queries = 0;                 ///< tokens that have an enclosing operator
  std::map<int64_t, int64_t> structural_offsets;  ///< (enclosing operator - n) -> count, over those
  int64_t rare_queries = 0;                       ///< queries seeing >= 2 distinct token ids
  double rare_uniform = 0;                        ///< sum over them of |rarest| / |visible|
  int64_t retrieval_queries = 0;                  ///< recall examples whose query key is in the pairs
  double retrieval_uniform = 0;                   ///< sum over them of 1 / |keys the query sees|
  CircuitStats circuits;                          ///< previous-token and induction scores (examples 0: not measured)
  /// Bytes held by the running statistics (the kept maps excluded): bounded by the number of
  /// heads, classes and distinct offsets (< 2 N), not by the number of examples.
  size_t running_bytes() const;
};

/// Streams batches through a Probe and reduces every layer's attention maps into AttentionStats, keeping the first maps whole.
class AttentionRecorder {
 public:
  AttentionRecorder(const Probe& probe, StatsConfig config);  ///< records through `probe` what `config` asks for
  /// One forward pass (eval mode, no gradients) over the batch; every layer's maps are reduced
  /// as the observer receives them. ValueError for a layer without probabilities, a probe
  /// without axis tokens when a token statistic is asked for, token ids outside token_class.
  void add(const data::Batch& batch);
  /// Reduces one layer's maps p (B, h, N, N) directly (what add does per layer; tests use it
  /// with hand-built maps). tokens: int64 (B, N) axis tokens, or undefined.
  void add_maps(int64_t layer, const Tensor& p, const Tensor& tokens);
  /// Call once per batch after its layers' add_maps: counts examples and the data-level sums.
  void end_batch(const Tensor& tokens, int64_t batch_size);
  const AttentionStats& stats() const { return stats_; }  ///< what was measured so far

 private:
  /// The retrieval sums of one example's maps p (h, N, N) with its tokens.
  void add_retrieval(LayerStats& ls, int64_t layer, const double* p, const int64_t* tok, int64_t H, int64_t N);

  Probe probe_;
  StatsConfig config_;
  AttentionStats stats_;
};

/// For each position of a ListOps sequence (axis tokens; -1 = CLS), the position of the opening
/// token of its enclosing operator: for a digit, the operator it is an argument of; for an
/// opening token, its parent operator; for `]`, the operator it closes. -1 for the root's
/// opening token, CLS and padding. ValueError for an unbalanced `]`.
std::vector<int64_t> listops_enclosing_operator(const std::vector<int64_t>& tokens);

/// The roles a head holds, and the measurements that decided them.
struct HeadRole {
  double confidence = 0;  ///< mean over queries of the largest weight
  int64_t offset = 0;         ///< the most common argmax offset
  double offset_share = 0;    ///< its share of queries
  bool positional = false;  ///< offset_share reaches RoleThresholds::positional
  double structural = NAN;    ///< share of structural hits (NaN: not measured)
  bool is_structural = false;  ///< structural beats the baseline by structural_margin
  double rare_mass = NAN;     ///< mean mass on the rarest tokens (NaN: not measured)
  bool is_rare = false;  ///< rare_mass passes its thresholds
  double retrieval = NAN;     ///< mean weight from the query on the answer (NaN: not measured)
  bool is_retrieval = false;  ///< retrieval passes its thresholds
  double previous_token = NAN;  ///< mean weight on the previous token, repeated random sequences (NaN: not measured)
  bool is_previous_token = false;  ///< previous_token passes its thresholds
  double induction = NAN;       ///< mean weight on the token after the earlier occurrence (NaN: not measured)
  bool is_induction = false;  ///< induction passes its thresholds
  /// "positional(-1)", "structural", "rare", "retrieval", "previous_token", "induction", joined
  /// by "+", or "-"
  std::string label() const;
};

/// The thresholds that give a head a role.
struct RoleThresholds {
  double positional = 0.9;          ///< offset share
  double structural_margin = 0.10;  ///< over the fixed-offset baseline
  double rare_mass = 0.5;  ///< mean mass on the rarest tokens
  double rare_margin = 0.10;        ///< over uniform attention
  double retrieval_mass = 0.5;  ///< mean weight on the answer
  double retrieval_margin = 0.10;   ///< over uniform attention
  double previous_token = 0.5;  ///< mean weight on the previous token
  double previous_margin = 0.10;    ///< over uniform attention
  double induction = 0.5;  ///< mean weight on the token after the earlier occurrence
  double induction_margin = 0.10;   ///< over uniform attention
};

/// [layer][head]
std::vector<std::vector<HeadRole>> head_roles(const AttentionStats& stats, const RoleThresholds& t = {});
HeadMatrix confidence(const AttentionStats& stats);  ///< each head's mean confidence (NaN: no queries)
double structural_baseline(const AttentionStats& stats);  ///< best fixed-offset share (NaN: no data)
double rare_uniform_baseline(const AttentionStats& stats);  ///< the rare mass uniform attention would give (NaN: no data)
double retrieval_uniform_baseline(const AttentionStats& stats);  ///< NaN: no recall examples

/// Associative recall: the position of the answer to the query at `query` (the position after the
/// last earlier key equal to tokens[query]), or -1 when the query's key is not among the pairs.
/// Keys are the ids in [0, keys); negative ids (CLS) are skipped.
int64_t recall_answer_position(const int64_t* tokens, int64_t query, int64_t keys);

/// A markdown table per layer: head, confidence, top offset (share), structural share, rare
/// mass, retrieval mass, previous-token and induction scores (when measured), importance and
/// relevance (when given), role; with the baselines stated above it.
std::string role_table(const AttentionStats& stats, const HeadMatrix* importance = nullptr,
                       const HeadMatrix* relevance = nullptr, const RoleThresholds& t = {});

/// A (layers x heads) heatmap PNG; layers with fewer heads leave grey cells.
void save_head_heatmap(const std::string& path, const std::string& title, const HeadMatrix& values);
/// One PNG per (example, head) of attention (B, h, N, M): `DIR/attention_b<b>_h<i>.png`, queries
/// down, keys across, labelled with the tokens when given (one per position, N == M for both),
/// else indices. Returns the paths written. Creates DIR; FileError naming it when it cannot.
std::vector<std::string> save_attention_maps(const std::string& dir, const Tensor& attention,
                                             const std::vector<std::string>& query_labels = {},
                                             const std::vector<std::string>& key_labels = {});

}  // namespace attnlab::analysis
/// @}

/// @file
/// `sinkhorn`: sparse Sinkhorn attention (Tay et al. 2020, "Sparse Sinkhorn Attention";
/// docs/attention.md, "sinkhorn"). The sequence is cut into nb = N/b blocks; a learned sort net
/// scores blocks against blocks, Sinkhorn normalisation makes that a (soft) permutation P shared
/// by all heads, and query block i attends jointly to its own block and to the sorted block
/// K~_i = sum_j P[i, j] K_j:
///
///   s_j = mean of x over the allowed positions of block j (0 if none)   (B, nb, D)
///   R = (s sort_net^T + bias)[:, :nb] / temperature     (B, nb, nb)
///   iters times: R -= logsumexp over j (rows); R -= logsumexp over i (columns);  P = exp(R)
///   K~_i = sum_j P[i, j] K_j,  V~_i = sum_j P[i, j] V_j  (blocks of b rows)
///   O_i = softmax(q_i [K_i; K~_i]^T / sqrt(dk), allowed) [V_i; V~_i]   (B, h, nb, b, 2b) scores
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))
///
/// Cost O(N b) scores per head plus O(N nb) for sorting, never N x N; the returned attention
/// (need_weights) is the effective attention over the original keys, densified:
///   att[n, j*b + r] = allowed(j*b + r) * ([j == i] p_own[n, r] + P[i, j] p_sorted[n, r])
/// for query n in block i, so that O = att V exactly.
/// Key masks only: masked K and V rows are zeroed before sorting; sorted slot r is allowed iff
/// some key j*b + r is; a position masked in every head is padding and leaves the block summaries,
/// so no masked input moves an unmasked output. Self-attention only; N a multiple of b and
/// N <= max_len; not causal.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `sinkhorn` beside the head options (see the file's description).
struct SinkhornConfig {
  int64_t block = 32;  ///< b
  int64_t iters = 5;          ///< Sinkhorn normalisation iterations
  double temperature = 0.75;  ///< the sort logits are divided by it
  int64_t max_len = 512;  ///< nb_max = max_len / b rows of sort_net
};

/// The `sinkhorn` variant: sparse Sinkhorn attention over learned-sorted blocks (see the file's description).
class SinkhornAttention : public ProjectedAttention {
 public:
  SinkhornAttention(int64_t d_model, const HeadConfig& head, const SinkhornConfig& settings);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  /// Packed sequences: rejected, it takes key masks only (constant along N), and a segment mask varies along N.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("sinkhorn", "it takes key masks only (constant along N), and a segment mask varies along N");
  }
  std::string type_name() const override { return "SinkhornAttention"; }
  /// The sort matrix P (B, nb, nb) for x (B, N, D), N = nb * b, and an optional key mask
  /// (B|1, h|1, 1, N) whose positions masked in every head leave the block summaries.
  Tensor sort_matrix(const Tensor& x, const Tensor& keys = {});

  SinkhornConfig settings;  ///< the options the layer was built from
  std::shared_ptr<Linear> sort_net;  ///< weight (nb_max, D), bias (nb_max)
};

}  // namespace attnlab::nn
/// @}

/// @file
/// `routing`: routing attention (Roy, Saffar, Vaswani, Grangier 2021, "Efficient Content-Based
/// Sparse Attention with Routing Transformers"; docs/attention.md, "routing"). MHA projections.
///
///   q^ = q/||q||, k^ = k/||k||; each goes to its argmax-dot centroid (centroids (h, k, dk), unit rows)
///   allowed[n, m] = (cluster(q[n]) == cluster(k[m]) or m == n) and causal and padding
///   P = softmax_m(q.k/sqrt(dk) masked);  O = P V;  output = out_proj(concat_i(g_i * head_mask_i * O_i))
///   train mode, after the forward pass, without gradient, per head and cluster c with anything
///   assigned:  mu_c <- normalise(decay mu_c + (1 - decay) mean{q^, k^ assigned to c})
///   (the mean pools queries and keys of every batch element and position)
///
/// The fast path sorts queries and keys by (cluster, position) and multiplies each cluster's
/// queries by that cluster's keys only (grouped_scores / grouped_values below: one BLAS product
/// per (b, head, cluster), with their own backward), so no N x N matrix is formed unless one
/// cluster holds every key. The diagonal m == n gets its own slot, because q[n] and k[n] may go
/// to different clusters.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The `routing` variant: attention within clusters of queries and keys routed by k-means (see the file's description).
class RoutingAttention : public ProjectedAttention {
 public:
  RoutingAttention(int64_t d_model, const HeadConfig& config, int64_t clusters, double decay);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  /// Self-attention only (a context is an error). In train mode, updates `centroids` afterwards.
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "RoutingAttention"; }

  /// The cluster of every query and every key for input x (B, N, D): two (B, h, N) int64 tensors.
  std::pair<Tensor, Tensor> clusters_of(const Tensor& x);
  /// The cluster of each row of t (B, h, N, dk) (normalised inside): (B, h, N) int64.
  Tensor assign(const Tensor& t) const;
  /// The train-mode update from normalised queries/keys (B, h, N, dk) and their clusters.
  void update_centroids(const Tensor& q_unit, const Tensor& k_unit, const Tensor& q_cluster, const Tensor& k_cluster);

  int64_t clusters;  ///< k-means clusters per head
  double decay;      ///< the centroids' moving-average decay
  Tensor centroids;  ///< (h, k, dk) buffer, unit rows

 protected:
  Tensor prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                      const std::vector<int64_t>& keep) const override;
};

}  // namespace attnlab::nn
/// @}

/// @file
/// `linformer`: low-rank attention by projecting keys and values along the sequence (Wang et al.
/// 2020, "Linformer: Self-Attention with Linear Complexity"; docs/attention.md, "linformer").
///
///   K' = proj_k[:, :M] K,  V' = proj_v[:, :M] V      per head; (k, M) x (M, d) -> (k, d)
///   O_i = softmax(q_i K'_i^T / sqrt(dk)) V'_i           (N, k) scores: O(N k), never N x M
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))
///
/// Key masks only: masked keys' rows of K and V are zeroed before projecting, so a query whose
/// every key is masked gets V' = 0 and a zero output. Not causal. No attention probabilities are
/// returned (need_weights gives an undefined tensor): the k projected rows are not keys.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `linformer` beside the head options (see the file's description).
struct LinformerConfig {
  int64_t proj_len = 64;  ///< k
  int64_t max_len = 512;  ///< L: the longest key sequence proj_k can take
  bool share_kv = false;  ///< share=kv: proj_k projects the values too, and proj_v does not exist
};

/// The `linformer` variant: keys and values projected along the sequence to k rows (see the file's description).
class Linformer : public ProjectedAttention {
 public:
  Linformer(int64_t d_model, const HeadConfig& head, const LinformerConfig& settings);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  /// Packed sequences: rejected, it takes key masks only (constant along N), and a segment mask varies along N.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("linformer", "it takes key masks only (constant along N), and a segment mask varies along N");
  }
  std::string type_name() const override { return "Linformer"; }

  LinformerConfig settings;  ///< the options the layer was built from
  Tensor proj_k;  ///< (k, L)
  Tensor proj_v;  ///< (k, L), undefined with share=kv
};

}  // namespace attnlab::nn
/// @}

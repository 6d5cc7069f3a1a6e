/// @file
/// `diff`: differential attention (Ye et al. 2024, "Differential Transformer"; docs/attention.md,
/// "diff"). Each head has two query/key halves of size dk; the attention is the difference of
/// their two softmax maps, which cancels the attention both halves give to irrelevant keys:
///
///   lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init,
///   lambda_init = 0.8 - 0.6 exp(-0.3 (layer - 1))
///   O_i = (softmax(Q1_i K1_i^T / sqrt(dk)) - lambda softmax(Q2_i K2_i^T / sqrt(dk))) V_i
///   output = out_proj(concat_i(g_i * head_mask_i * (1 - lambda_init) * subln(O_i)))
///
/// subln is an RMSNorm over dv (eps 1e-5) shared by the heads. Without need_weights the two maps
/// never exist: two calls of the fused tile kernel give O1 = P1 V and O2 = P2 V, and
/// O = O1 - lambda O2 (the product distributes over the difference, so this is the formula).
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"
#include "nn/rms_norm.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The `diff` variant: differential attention, the difference of two softmax maps per head (see the file's description).
class DiffAttention : public Attention {
 public:
  DiffAttention(int64_t d_model, const HeadConfig& config, int64_t layer);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "DiffAttention"; }
  /// A KV cache holding both key halves as 2h key heads, (B, 2h, max_len, dk), and the values,
  /// (B, h, max_len, dv).
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  /// The re-weighting scalar lambda (a 0-d tensor, differentiable in the four lambda vectors).
  Tensor lambda() const;
  double lambda_init() const;  ///< lambda's initial value, set by the layer's depth

  HeadConfig config;                                         ///< key_size = dk, the size of one half
  int64_t layer;                                             ///< 1-based depth, sets lambda_init
  std::shared_ptr<Linear> q_proj;    ///< (h*2*dk, D), head i owns rows [2i dk, (2i+2) dk)
  std::shared_ptr<Linear> k_proj;    ///< (h*2*dk, D), as q_proj
  std::shared_ptr<Linear> v_proj;    ///< (h*dv, D)
  std::shared_ptr<Linear> out_proj;  ///< (D, h*dv)
  Tensor lambda_q1;                  ///< (dk), shared by the heads
  Tensor lambda_k1;                  ///< (dk), shared by the heads
  Tensor lambda_q2;                  ///< (dk), shared by the heads
  Tensor lambda_k2;                  ///< (dk), shared by the heads
  std::shared_ptr<RMSNorm> subln;                            ///< weight (dv), eps 1e-5
  std::shared_ptr<HardConcreteGate> gate;                    ///< null unless gate=hard_concrete
  Tensor head_mask;                                          ///< (h) buffer, ones
  Generator gen;                                             ///< lambda init, attention dropout

 private:
  /// Packed sequences on the fused kernel; need_weights takes the dense segment mask (composed path).
  AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                   bool need_weights) override;
  /// forward, with segment ids (B, N) passed to the fused kernel (self-attention, need_weights false).
  AttentionResult forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool need_weights,
                               const Tensor& segment_ids);
  /// (B, T, h*2*dk) -> the two halves (B, h, T, dk) each, as views.
  std::pair<Tensor, Tensor> halves(const Tensor& t) const;
  /// Difference head outputs o (B, h, T, dv) -> the layer output (B, T, D).
  Tensor finish(const Tensor& o) const;
};

}  // namespace attnlab::nn
/// @}

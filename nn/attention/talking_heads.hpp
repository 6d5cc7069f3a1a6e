/// @file
/// `talking_heads`: talking-heads attention (Shazeer, Lan, Cheng, Ding, Hou 2020,
/// "Talking-Heads Attention"; docs/attention.md, "talking_heads", gates and pruning under "Head
/// gates"). Three head counts: hk logit heads (q/k), h softmax heads, hv value heads, joined by two
/// learned mixes.
///
///   J_a[n, m] = q_a[n] . k_a[m] / sqrt(dk)                    a < hk
///   L_j = sum_a J_a pre_mix[a, j]      (pre=false: hk == h, L = J)
///   W_j = softmax_m(L_j masked)                                j < h   (mask, dropout, returned)
///   U_v = sum_j W_j post_mix[j, v]     (post=false: h == hv, U = W)
///   O_v = U_v V_v                                              v < hv  (gate, head_mask)
///   output = out_proj(concat_v(g_v * head_mask_v * O_v))
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `talking_heads` beside the head options (see the file's description).
struct TalkingHeadsConfig {
  HeadConfig head;          ///< heads = h (softmax heads); key_size, value_size default to D/h
  int64_t logit_heads = 0;  ///< hk
  int64_t value_heads = 0;  ///< hv
  bool pre = true;          ///< learned pre-softmax mix (hk -> h)
  bool post = true;         ///< learned post-softmax mix (h -> hv)
  /// "identity": a square mix starts as the identity (the layer starts as mha), a non-square one
  /// normal(0, 1/sqrt(rows)); "random": both start normal(0, 1/sqrt(rows)), as in the paper.
  std::string mix_init = "identity";
};

/// The `talking_heads` variant: heads mixed before and after the softmax (see the file's description).
class TalkingHeadsAttention : public Attention {
 public:
  /// Throws ValueError naming the options when pre=false with hk != h or post=false with h != hv,
  /// or when mix_init is neither identity nor random.
  TalkingHeadsAttention(int64_t d_model, const TalkingHeadsConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  /// `keep` indexes value heads: slices v_proj rows, out_proj columns, post_mix columns,
  /// head_mask and the gate; q/k, pre_mix and the softmax heads are untouched. A layer with
  /// post=false comes back with post=true and the matching columns of the identity.
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "TalkingHeadsAttention"; }
  /// A KV cache with hk key heads and hv value heads (KVCache); both mixes act on the new rows only.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  TalkingHeadsConfig config;  ///< the options the layer was built from
  std::shared_ptr<Linear> q_proj;    ///< (hk*dk, D)
  std::shared_ptr<Linear> k_proj;    ///< (hk*dk, D)
  std::shared_ptr<Linear> v_proj;    ///< (hv*dv, D)
  std::shared_ptr<Linear> out_proj;  ///< (D, hv*dv)
  Tensor pre_mix;                                            ///< (hk, h), undefined when pre=false
  Tensor post_mix;                                           ///< (h, hv), undefined when post=false
  std::shared_ptr<HardConcreteGate> gate;                    ///< (hv) gates; null unless gate=hard_concrete
  Tensor head_mask;                                          ///< (hv) buffer, ones
  Generator gen;                                             ///< attention dropout
};

}  // namespace attnlab::nn
/// @}

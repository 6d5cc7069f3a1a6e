/// @file
/// `mixer`: the token-mixing MLP of MLP-Mixer as an attention replacement (Tolstikhin et al.
/// 2021, "MLP-Mixer: An all-MLP Architecture for Vision"; docs/attention.md, "mixer"). For each
/// channel c, positions are mixed by a two-layer MLP over the sequence:
///
///   y[:, :, c] = w2[:N] gelu_tanh(w1[:, :N] x[:, :, c] + b1) + b2[:N]
///
/// Parameters token_mlp.w1.weight (hm, L), token_mlp.w1.bias (hm), token_mlp.w2.weight (L, hm),
/// token_mlp.w2.bias (L); a length-N input uses the first N positions (N <= L = max_len). No norm,
/// residual, heads, gates or mask; self-attention only; not causal.
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The two Linear layers, named w1 (L -> hm) and w2 (hm -> L).
/// The token-mixing MLP of one Mixer: w2(gelu_tanh(w1(.))) along the sequence.
class TokenMlp : public Module {
 public:
  TokenMlp(int64_t max_len, int64_t hidden, bool bias);  ///< over max_len positions, `hidden` wide
  std::string type_name() const override { return "TokenMlp"; }
  std::shared_ptr<Linear> w1;  ///< (hidden, max_len)
  std::shared_ptr<Linear> w2;  ///< (max_len, hidden)
};

/// The `mixer` variant: MLP-Mixer's token-mixing MLP in place of attention (see the file's description).
class Mixer : public Attention {
 public:
  Mixer(int64_t d_model, int64_t max_len, int64_t hidden, bool bias);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  /// Errors for a context, a mask, causal, or N > max_len; need_weights gives no attention.
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  /// mixer has no heads: always a ValueError saying so.
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  /// Packed sequences: rejected, it takes no mask.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("mixer", "it takes no mask");
  }
  std::string type_name() const override { return "Mixer"; }

  int64_t max_len;                      ///< the longest sequence (the MLP's width along N)
  int64_t hidden;                       ///< the MLP's hidden width
  bool bias;                            ///< biases in the MLP
  std::shared_ptr<TokenMlp> token_mlp;  ///< the token-mixing MLP
};

}  // namespace attnlab::nn
/// @}

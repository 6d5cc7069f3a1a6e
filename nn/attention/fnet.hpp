/// @file
/// `fnet`: attention-free Fourier token mixing (Lee-Thorp, Ainslie, Eckstein, Ontanon 2021,
/// "FNet: Mixing Tokens with Fourier Transforms"; docs/attention.md, "fnet"):
///
///   y = Re(FFT over the sequence of FFT over the hidden dimension of x)      (B, N, D)
///
/// No parameters, no out_proj, no heads, no gates, no mask; self-attention only; not causal.
/// The transform runs on FFTW (kernels/fourier_mix.hpp); its backward is the same transform.
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The `fnet` variant: attention-free token mixing by Fourier transforms (see the file's description).
class FNet : public Attention {
 public:
  explicit FNet(int64_t d_model);  ///< a parameter-free layer of width d_model
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  /// Errors for a context, a mask or causal; need_weights gives no attention (fnet has none).
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  /// fnet has no heads: always a ValueError saying so.
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override { return format_spec(schema(), {}); }
  /// Packed sequences: rejected, it takes no mask.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("fnet", "it takes no mask");
  }
  std::string type_name() const override { return "FNet"; }
};

/// The checks fnet and mixer share: x (B, N, D); no context, no mask, not causal.
void check_attention_free(const char* variant, int64_t d_model, const Tensor& x, const Tensor& context,
                          const Tensor& mask, bool causal);

}  // namespace attnlab::nn
/// @}

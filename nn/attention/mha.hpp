// `mha`: scaled dot-product multi-head attention (Vaswani et al. 2017), with the key size
// decoupled from D/h (Bhojanapalli et al. 2020, "Low-Rank Bottleneck in Multi-head Attention
// Models") and optional head gates (docs/attention.md, "mha" and "Head gates").
//
//   Score_i[n, m] = q_i[n] . k_i[m] / sqrt(dk);  P_i = softmax_m(Score_i masked);  O_i = P_i V_i
//   output = out_proj(concat_i(g_i * head_mask_i * O_i))
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

namespace attnlab::nn {

class MultiHeadAttention : public Attention {
 public:
  MultiHeadAttention(int64_t d_model, const HeadConfig& config, bool key_bias);
  static VariantSchema schema();
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "MultiHeadAttention"; }
  // A KV cache: K and V of every position so far, (B, h, max_len, dk|dv), appended per step.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  HeadConfig config;
  bool key_bias;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;
  std::shared_ptr<HardConcreteGate> gate;  // null unless gate=hard_concrete
  Tensor head_mask;                        // (h) buffer, ones
  Generator gen;                           // attention dropout
};

// The per-head multiplier g * head_mask as (1, h, 1, 1), or undefined when neither applies.
Tensor head_scale(const std::shared_ptr<HardConcreteGate>& gate, const Tensor& head_mask);

}  // namespace attnlab::nn

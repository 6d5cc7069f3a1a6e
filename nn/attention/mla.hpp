/// @file
/// `mla`: multi-head latent attention (DeepSeek-AI 2024, "DeepSeek-V2"; docs/attention.md, "mla").
/// Keys and values come from one low-rank latent per position, shared by every head, plus one
/// RoPE key per position, also shared; only those (r + dr numbers a token) are cached for
/// decoding.
///
///   [c, kr] = x_c kv_down^T  split (r, dr);  c = RMSNorm(c);  kr = RoPE(kr)          (B, M, r), (B, M, dr)
///   [k_nope_i, v_i] = (c kv_up^T)_i          split (dk, dv)                           per head i
///   qx = x (q_rank = 0) or RMSNorm(x q_down^T);  [q_nope_i, q_rope_i] = (qx q_up^T)_i  split (dk, dr)
///   Score_i = (q_nope_i . k_nope_i + RoPE(q_rope_i) . kr) / sqrt(dk + dr);  P_i = softmax_m(Score_i masked)
///   output = out_proj(concat_i(g_i * head_mask_i * P_i V_i))
///
/// Layouts (DeepSeek-V2's reference code): the query projection's h*(dk+dr) rows are head-major,
/// head i owning rows [i*(dk+dr), (i+1)*(dk+dr)), its first dk the no-RoPE part, the last dr the
/// RoPE part; kv_up's h*(dk+dv) rows likewise, head i owning [i*(dk+dv), (i+1)*(dk+dv)), first
/// dk key then dv value; kv_down's r + dr rows are the latent's r, then the RoPE key's dr. RoPE is
/// the rotate-half form at positions 0..N-1 (queries) and 0..M-1 (keys). RMSNorm eps is 1e-6.
///
/// Decoding (forward_step) keeps c and the rotated kr per position and has two paths:
///   plain:    k_nope, v = c kv_up^T each step, then attention as in forward;
///   absorbed: kv_up folded into the query and the output, W_uk_i (dk, r), W_uv_i (dv, r) head i's
///             key and value rows of kv_up:
///             Score_i = ((q_nope_i W_uk_i) . c + q_rope_i . kr) / sqrt(dk + dr),  O_i = (P_i c) W_uv_i^T.
/// The option `absorb` (default true) picks the absorbed one.
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"
#include "nn/rms_norm.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `mla` beside the head options (see the file's description).
struct LatentConfig {
  HeadConfig head;        ///< heads, key_size dk (no-RoPE part), value_size dv, causal, dropout, gate
  int64_t kv_rank = 0;    ///< r
  int64_t q_rank = 0;     ///< rq; 0 = queries not compressed
  int64_t rope_size = 0;  ///< dr, even and positive
  bool absorb = true;     ///< forward_step: absorbed (true) or plain decoding
};

/// The decoding cache: the normalised latent c and the rotated RoPE key of every position so
/// far, (r + dr) numbers per token.
struct LatentCache : AttentionCache {
  Tensor c;   ///< (B, max_len, r)
  Tensor kr;  ///< (B, max_len, dr)
  int64_t numel() const override { return c.numel() + kr.numel(); }
};

/// The `mla` variant: multi-head latent attention, keys and values from one low-rank latent per position (see the file's description).
class LatentAttention : public Attention {
 public:
  LatentAttention(int64_t d_model, const LatentConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "LatentAttention"; }
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  LatentConfig config;  ///< the options the layer was built from
  std::shared_ptr<Linear> q_proj;          ///< (h*(dk+dr), D); q_rank = 0 only
  std::shared_ptr<Linear> q_down;          ///< (rq, D); q_rank > 0 only
  std::shared_ptr<Linear> q_up;            ///< (h*(dk+dr), rq); q_rank > 0 only
  std::shared_ptr<RMSNorm> q_norm;         ///< (rq); q_rank > 0 only
  std::shared_ptr<Linear> kv_down;         ///< (r + dr, D)
  std::shared_ptr<Linear> kv_up;           ///< (h*(dk+dv), r)
  std::shared_ptr<RMSNorm> kv_norm;        ///< (r)
  std::shared_ptr<Linear> out_proj;        ///< (D, h*dv)
  std::shared_ptr<HardConcreteGate> gate;  ///< null unless gate=hard_concrete
  Tensor head_mask;                        ///< (h) buffer, ones
  Generator gen;                           ///< attention dropout

 private:
  /// Packed sequences on the fused kernel; need_weights takes the dense segment mask (composed path).
  AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                   bool need_weights) override;
  /// forward, with segment ids (B, N) passed to the fused kernel (self-attention, need_weights false).
  AttentionResult forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool need_weights,
                               const Tensor& segment_ids);
  struct Latent {
    Tensor c;   ///< (B, M, r), normalised
    Tensor kr;  ///< (B, M, dr), rotated
  };
  /// x (B, N, D) -> q (B, h, N, dk+dr), its RoPE part rotated as at positions offset, offset+1, ...
  Tensor queries(const Tensor& x, int64_t offset) const;
  /// src (B, M, D) -> the latent and the rotated RoPE key, positions from offset.
  Latent latent(const Tensor& src, int64_t offset) const;
  /// The per-head keys [k_nope_i, kr] (B, h, M, dk+dr) and values (B, h, M, dv) of a latent.
  std::pair<Tensor, Tensor> keys_values(const Latent& lat) const;
  /// Softmax attention composed from autograd ops: o (B, h, N, dv) and p (B, h, N, M).
  std::pair<Tensor, Tensor> attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& allowed);
  /// One absorbed decoding step over the cached latent: o (B, h, T, dv).
  Tensor absorbed_step(const Tensor& q, const Latent& lat, const Tensor& allowed) const;
  double scale() const;
};

}  // namespace attnlab::nn
/// @}

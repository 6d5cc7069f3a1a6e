/// @file
/// `mha`: scaled dot-product multi-head attention (Vaswani et al. 2017), with the key size
/// decoupled from D/h (Bhojanapalli et al. 2020, "Low-Rank Bottleneck in Multi-head Attention
/// Models"), optional head gates, and the options of current models (docs/attention.md, "mha",
/// "Options of current models" and "Head gates").
///
///   q_i = RoPE(RMSNorm(x Wq_i^T)),  k_j = RoPE(RMSNorm(c Wk_j^T)),  j = kv(i) (grouped queries)
///   Score_i[n, m] = softcap(q_i[n] . k_j[m] / sqrt(dk) - slope_i |n - m|)
///   P_i = score function of Score_i masked (softmax with or without a sink, sigmoid, softpick)
///   O_i = P_i V_j;  output = out_proj(concat_i(g_i * head_mask_i * O_i))
/// Every option is off by default: then this is plain mha.
/// @ingroup attention
#pragma once
#include <optional>

#include "nn/attention/attention.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/linear.hpp"
#include "nn/rms_norm.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// mha's `score` option: the function from scores to weights (docs/attention.md, "Options of
/// current models"), parsed once from the spec.
enum class ScoreFunction { Softmax, Sigmoid, Softpick };
/// "softmax", "sigmoid", "softpick".
const char* score_name(ScoreFunction f);
/// The reverse; ValueError naming the allowed names otherwise.
ScoreFunction parse_score(const std::string& name);

/// The options of current models (docs/attention.md, "Options of current models").
struct MhaOptions {
  int64_t kv_heads = 0;                 ///< g key/value heads; 0 = heads (no grouping)
  std::vector<int64_t> kv_index;        ///< (h) each query head's kv head (prune_heads); empty = i / (h/g)
  bool alibi = false;
  std::vector<double> alibi_slopes;     ///< (h) pinned slopes (prune_heads); empty = alibi_slopes(h)
  bool qk_norm = false;
  double softcap = 0;                   ///< c; 0 = off
  ScoreFunction score = ScoreFunction::Softmax;
  std::optional<double> sigmoid_bias;   ///< b; unset = -log(M)
  double softpick_eps = 1e-6;
  bool sinks = false;
  bool rope = false;
  double rope_base = 10000;
};

/// The `mha` variant: scaled dot-product multi-head attention with the options of current models (see the file's description).
class MultiHeadAttention : public Attention {
 public:
  /// Projections of width D for h heads of sizes dk, dv; k_proj has a bias when config.bias and key_bias.
  MultiHeadAttention(int64_t d_model, const HeadConfig& config, bool key_bias, const MhaOptions& options = {});
  static VariantSchema schema();  ///< `mha`'s options, defaults and costs
  /// The layer a parsed spec asks for (the registry's factory); ValueError for options that do not fit D.
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "MultiHeadAttention"; }
  /// A KV cache: K (after qk_norm and RoPE) and V of every position so far for the g key/value
  /// heads, (B, g, max_len, dk|dv), appended per step.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  int64_t kv_heads() const { return options.kv_heads; }  ///< g, the key/value heads
  /// The key/value head of every query head, (h) entries.
  std::vector<int64_t> kv_map() const;
  /// The ALiBi slope of every head, (h) entries.
  std::vector<double> slopes() const;

  HeadConfig config;                       ///< h, dk, dv and the flags
  bool key_bias;                           ///< k_proj has a bias when config.bias and key_bias
  MhaOptions options;                      ///< kv_heads resolved to g
  std::shared_ptr<Linear> q_proj;          ///< (h dk, D)
  std::shared_ptr<Linear> k_proj;          ///< (g dk, D)
  std::shared_ptr<Linear> v_proj;          ///< (g dv, D)
  std::shared_ptr<Linear> out_proj;        ///< (D, h dv)
  std::shared_ptr<RMSNorm> q_norm;         ///< null unless qk_norm
  std::shared_ptr<RMSNorm> k_norm;         ///< null unless qk_norm
  std::shared_ptr<HardConcreteGate> gate;   ///< null unless gate=hard_concrete
  Tensor sinks;                             ///< (h) parameter, undefined unless sinks
  Tensor kv_index;                          ///< (h) int64 buffer, undefined unless options.kv_index is set
  Tensor head_mask;                         ///< (h) buffer, ones
  Generator gen;                            ///< attention dropout

 private:
  /// (B, N, D) -> (B, h, N, dk): projected, qk_norm, RoPE at positions offset, offset + 1, ...
  Tensor queries(const Tensor& x, int64_t offset);
  /// (B, M, D) -> (B, g, M, dk), the same steps for the keys.
  Tensor keys(const Tensor& c, int64_t offset);
  /// (B, g, M, d) -> (B, h, M, d): each query head's key/value head.
  Tensor expand_kv(const Tensor& t) const;
  /// P (B, h, N, M) from q (B, h, N, dk), k (B, g, M, dk) (g divides h) at query positions q_offset + n:
  /// scores, ALiBi, softcap, then the score function over the allowed entries.
  Tensor probabilities(const Tensor& q, const Tensor& k, const Tensor& allowed, int64_t q_offset) const;
  Tensor score_function(const Tensor& s, const Tensor& allowed) const;
  /// forward, with segment ids (B, N) passed to the fused kernel (self-attention, need_weights false).
  AttentionResult forward_with(const Tensor& x, const Tensor& context, const Tensor& mask, bool causal, bool need_weights,
                               const Tensor& segment_ids);
  /// Packed sequences on the fused kernel; need_weights takes the dense segment mask (composed path).
  AttentionResult forward_segments(const Tensor& x, const Tensor& segment_ids, const Tensor& mask, bool causal,
                                   bool need_weights) override;
  /// The kernel's options for M keys (draws the dropout seed in train mode).
  TileOptions tile_options(int64_t M);
};

/// ALiBi slopes for h heads (Press et al. 2022): 2^(-8(i+1)/h) for h a power of two; otherwise
/// the P slopes of the largest power of two P below h, then entries 0, 2, 4, ... of the 2P list.
std::vector<double> alibi_slopes(int64_t heads);

/// The per-head multiplier g * head_mask as (1, h, 1, 1), or undefined when neither applies.
Tensor head_scale(const std::shared_ptr<HardConcreteGate>& gate, const Tensor& head_mask);

}  // namespace attnlab::nn
/// @}

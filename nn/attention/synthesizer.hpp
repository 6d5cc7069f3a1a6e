/// @file
/// `synthesizer`: synthetic attention (Tay et al. 2020, "Synthesizer: Rethinking Self-Attention
/// in Transformer Models"; docs/attention.md, "synthesizer"). The attention logits come from one or
/// more "parts" instead of (or besides) query-key dot products, then the usual masked softmax, P V
/// and out_proj. Self-attention only, N <= max_len.
///
///   dense:             S[b,i,n,m] = relu(x w1^T + b1)[b,n,i,:] . w2[i,m,:] + b2[i,m]
///   random:            S = logits[:, :N, :N]              (trained)
///   fixed_random:      S = logits[:, :N, :N]              (buffer, never trained)
///   factorized_random: S = r1[:, :N] r2[:, :N]^T
///   factorized_dense:  S[n,m] = A[n, m mod a] * Bf[n, m div a],  A = H.wa + ba, Bf = H.wb + bb
///   vanilla:           S = q . k / sqrt(dk)
///   several parts:     S = sum_p softmax(mix_logits)_p S_p
///   output = out_proj(concat_i(g_i * head_mask_i * softmax_m(S_i masked) V_i))
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `synthesizer` beside the head options (see the file's description).
struct SynthesizerConfig {
  HeadConfig head;                          ///< key_size is used by the vanilla part only
  std::vector<std::string> parts{"dense"};  ///< in the order written; index p of mix_logits
  int64_t max_len = 512;                    ///< L
  int64_t hidden = 0;                       ///< dh of the dense parts
  int64_t factor = 8;                       ///< k of factorized_random
  int64_t a = 0;                            ///< factorized_dense: a * b >= max_len
  int64_t b = 0;                            ///< see a
  bool has(const std::string& part) const;  ///< whether `parts` includes `part`
};

/// h independent Linear(in, out) layers stacked: weight (h, out, in), bias (h, out). Applied to
/// per-head activations (B, h, N, in), keeping only the first `rows` outputs (the dense
/// synthesizer's w2 has max_len outputs of which a length-N input uses N).
class HeadwiseLinear : public Module {
 public:
  HeadwiseLinear(int64_t heads, int64_t out_features, int64_t in_features, bool bias);  ///< one (out, in) weight per head
  /// t (B, h, N, in) -> (B, h, N, rows)
  Tensor forward(const Tensor& t, int64_t rows);
  std::string type_name() const override { return "HeadwiseLinear"; }
  Tensor weight;  ///< (h, out, in)
  Tensor bias;    ///< (h, out), undefined when bias = false
};

/// One source of synthetic logits.
class SynthesizerPart : public Module {
 public:
  /// x (B, N, D) -> S (B, h, N, N), or (1, h, N, N) for parts that ignore the input.
  virtual Tensor logits(const Tensor& x) = 0;
  /// For forward_step: rows [start, start + T) of logits() over the columns [0, start + T),
  /// x_new (B, T, D) being those rows' inputs -> (B|1, h, T, start + T). Every part but vanilla
  /// needs only the new rows' inputs and positions; vanilla writes its new keys into `keys`
  /// (B, h, max_len, dk) and reads the cached ones (undefined for the other parts).
  virtual Tensor logits_rows(const Tensor& x_new, int64_t start, const Tensor& keys) = 0;
};

/// The `synthesizer` variant: attention logits synthesized from dense, random or factorized parts, optionally mixed with vanilla attention (see the file's description).
class Synthesizer : public Attention {
 public:
  Synthesizer(int64_t d_model, const SynthesizerConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "Synthesizer"; }
  /// A KV cache (KVCache: V, and K when a part is vanilla) for min(max_len, config.max_len)
  /// positions; each part computes the new rows of its logits (SynthesizerPart::logits_rows).
  /// forward_step beyond config.max_len positions throws ShapeError naming max_len.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;
  /// softmax(mix_logits) (P): the weight of each part; a 1-element ones tensor for one part.
  Tensor mixture_weights() const;

  SynthesizerConfig config;  ///< the options the layer was built from
  std::vector<std::shared_ptr<SynthesizerPart>> parts;  ///< as in config.parts
  Tensor mix_logits;                                    ///< (P), only with several parts
  std::shared_ptr<Linear> v_proj;    ///< (h*dv, D)
  std::shared_ptr<Linear> out_proj;  ///< (D, h*dv)
  std::shared_ptr<HardConcreteGate> gate;  ///< null unless gate=hard_concrete
  Tensor head_mask;                        ///< (h) buffer, ones
  Generator gen;                           ///< attention dropout
};

}  // namespace attnlab::nn
/// @}

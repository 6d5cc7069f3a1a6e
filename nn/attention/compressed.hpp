/// @file
/// `compressed`: memory-compressed attention (Liu et al. 2018, "Generating Wikipedia by
/// Summarizing Long Sequences"; docs/attention.md, "compressed"). The projected keys and values are
/// shortened s-fold by strided convolutions (kernel = stride = s) that mix every channel of
/// every head, then each head attends over the M/s compressed rows:
///
///   Kc = conv_k(K),  Vc = conv_v(V)       (B, M, H*d) -> (B, M/s, h*d), H = kv_heads (= h)
///   O_i = softmax(q_i Kc_i^T / sqrt(dk), allowed) Vc_i      (N, M/s) scores, never N x M
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))
///
/// Masks: key masks constant across heads, (B|1, 1, 1, M). Masked K and V rows are zeroed before
/// the convolutions; a compressed row is allowed iff one of its s source keys is. M must be a
/// multiple of s. Not causal. No attention probabilities are returned (need_weights gives an
/// undefined tensor): compressed rows are not keys.
///
/// Pruning. The convolutions read every head's keys and values, so a kept head's Kc_i, Vc_i
/// depend on the pruned heads' projections. prune_heads therefore keeps k_proj, v_proj and the
/// convolutions' input channels whole and cuts only what belongs to the pruned heads' outputs:
/// q_proj rows, the convolutions' output channels (weight rows and bias), out_proj columns,
/// head_mask and the gates. The smaller layer records the width of its k/v projections in the
/// option `kv_heads` (default = heads; only a pruned layer differs), so its output equals this
/// layer's with the pruned heads masked out.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `compressed` beside the head options (see the file's description).
struct CompressedConfig {
  int64_t stride = 4;    ///< s: kernel size and stride of both convolutions
  int64_t kv_heads = 0;  ///< heads of k_proj/v_proj and the convolutions' inputs; 0 = heads
};

/// Conv1d with kernel = stride = s over the sequence of a channels-last input, PyTorch-shaped
/// parameters: weight (out, in, s), bias (out). Non-overlapping windows make it one matmul:
/// y[b, j] = bias + W' x[b, j*s : (j+1)*s] flattened, with W'[o, t*in + c] = weight[o, c, t].
class StridedConv1d : public Module {
 public:
  StridedConv1d(int64_t in_channels, int64_t out_channels, int64_t stride, bool bias);  ///< kernel = stride = s
  /// t (B, L, in) -> (B, L/s, out); L must be a multiple of s (checked by the caller).
  Tensor forward(const Tensor& t);
  std::string type_name() const override { return "StridedConv1d"; }
  int64_t stride;  ///< s
  Tensor weight;  ///< (out, in, s)
  Tensor bias;    ///< (out), undefined when bias = false
};

/// The `compressed` variant: attention over keys and values compressed along the sequence by a strided convolution (see the file's description).
class CompressedAttention : public ProjectedAttention {
 public:
  CompressedAttention(int64_t d_model, const HeadConfig& head, const CompressedConfig& settings);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  /// See the header comment: k/v projections and convolution inputs stay whole.
  std::vector<HeadSlice> head_slices() const override;
  void own_options(OptionValues& values) const override;
  /// Packed sequences: rejected, it takes key masks only (constant along N), and a segment mask varies along N.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("compressed", "it takes key masks only (constant along N), and a segment mask varies along N");
  }
  std::string type_name() const override { return "CompressedAttention"; }

  CompressedConfig settings;  ///< kv_heads resolved (never 0 after construction)
  std::shared_ptr<StridedConv1d> compress_k;  ///< weight (h*dk, H*dk, s)
  std::shared_ptr<StridedConv1d> compress_v;  ///< weight (h*dv, H*dv, s)
};

}  // namespace attnlab::nn
/// @}

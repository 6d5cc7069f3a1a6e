/// @file
/// `nystrom`: Nyström-approximated softmax attention (Xiong et al. 2021, "Nyströmformer";
/// docs/attention.md, "nystrom"). With m landmarks, the segment means q~, k~ of q and k:
///
///   F  = softmax(q  k~^T / sqrt(dk))   (N, m)
///   A  = softmax(q~ k~^T / sqrt(dk))   (m, m)
///   Bm = softmax(q~ k^T  / sqrt(dk))   (m, M), masked keys' columns removed
///   O  = F (Z (Bm V)),  Z = pinv(A) by pinv_iters Newton-Schulz steps:
///        Z0 = A^T / (max_j sum_i |A_ij| * max_i sum_j |A_ij|)   (per batch and head)
///        Z <- 0.25 Z (13 I - AZ (15 I - AZ (7 I - AZ)))
///   conv = k > 0: O += depthwise conv of V along the sequence, `conv.weight` (h, 1, k, 1),
///        zero-padded (k-1)/2 before and k/2 after (PyTorch cross-correlation)
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))
///
/// Cost O(N m) per head: the products run right to left and the N x M matrix F Z Bm is formed
/// only for need_weights (it is the returned attention). N and M must be multiples of m.
/// Key masks only: masked positions zero k (and q, in self-attention, where queries and keys
/// share positions) before the landmark means, mask Bm's columns and zero V before the conv.
/// Not causal; with conv > 0 self-attention only.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `nystrom` beside the head options (see the file's description).
struct NystromConfig {
  int64_t landmarks = 32;  ///< m
  int64_t pinv_iters = 6;  ///< Newton-Schulz iterations of the pseudo-inverse
  int64_t conv = 0;        ///< kernel size k of the value convolution; 0 = none
};

/// Depthwise convolution along the sequence of per-head values: weight (h, 1, k, 1) as a PyTorch
/// Conv2d(h, h, (k, 1), groups=h, bias=False) over (B, h, N, dv), zero-padded (k-1)/2 on the
/// left and k/2 on the right so that the output keeps length N.
class DepthwiseSeqConv : public Module {
 public:
  DepthwiseSeqConv(int64_t heads, int64_t kernel);  ///< one length-k filter per head
  /// v (B, h, N, dv) -> (B, h, N, dv)
  Tensor forward(const Tensor& v);
  std::string type_name() const override { return "DepthwiseSeqConv"; }
  Tensor weight;  ///< (h, 1, k, 1)
};

/// The `nystrom` variant: softmax attention approximated through m landmarks (see the file's description).
class NystromAttention : public ProjectedAttention {
 public:
  NystromAttention(int64_t d_model, const HeadConfig& head, const NystromConfig& settings);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  /// Packed sequences: rejected, it takes key masks only (constant along N), and a segment mask varies along N.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("nystrom", "it takes key masks only (constant along N), and a segment mask varies along N");
  }
  std::string type_name() const override { return "NystromAttention"; }

  NystromConfig settings;  ///< the options the layer was built from
  std::shared_ptr<DepthwiseSeqConv> conv;  ///< null unless conv > 0
};

/// The Newton-Schulz iteration above on a batch of square matrices a (..., m, m), from the
/// documented Z0; differentiable (composed from matmul, abs, sum, amax).
Tensor newton_schulz_pinv(const Tensor& a, int64_t iters);

}  // namespace attnlab::nn
/// @}

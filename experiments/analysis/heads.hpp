/// @file
/// Per-head scores from gradients (docs/analysis.md):
///   - head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"):
///     I_{l,i} = sum over batches of |dL/d xi_{l,i}|, xi = the head_mask buffer (ones), L the
///     batch's mean loss; normalised per layer by the l2 norm over the layer's heads;
///   - head relevance by layer-wise relevance propagation of the top logit with the
///     conservative rules of Ali et al. 2022 (AH-rule, LN-rule; gradient x input elsewhere):
///     R_{l,i} = sum over positions and value dims of o_{l,i} * dy/do_{l,i}, o the head's output
///     after its gate and mask (before out_proj), accumulated over examples; normalised per layer
///     by the sum of |R| over the layer's heads (Voita et al. 2019).
/// @ingroup analysis
#pragma once
#include "experiments/analysis/probe.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

/// Accumulates |dL/d head_mask| over batches. The model runs in eval mode with its parameters
/// frozen (both restored afterwards); head masks must exist on every layer (ValueError naming
/// the layer otherwise).
class HeadImportance {
 public:
  explicit HeadImportance(const Probe& probe);  ///< importance of `probe`'s heads, nothing accumulated yet
  void add(const data::Batch& batch);  ///< one backward pass over `batch`, adding |dL/d head_mask|
  const HeadMatrix& raw() const { return sum_; }  ///< sums of |dL/d head_mask| over the batches
  HeadMatrix normalized() const;                    ///< each layer divided by its l2 norm
  int64_t batches() const { return batches_; }  ///< batches added

 private:
  Probe probe_;
  HeadMatrix sum_;
  int64_t batches_ = 0;
};

/// The conservation check of relevance propagation: what was explained, what reached the inputs, and what passed each layer's attention.
struct RelevanceCheck {
  double explained = 0;          ///< sum of the explained logits y
  double input_relevance = 0;    ///< sum over input_tensors of value * gradient (conservation: = y)
  std::vector<double> branch;    ///< per layer: sum of a_l * dy/da_l, a_l the attention output (B, N, D)
};

/// Accumulates LRP head relevance over batches. Needs attention probabilities from a composed
/// softmax (mha, collaborative, synthesizer, talking_heads, ...): the forward runs with the
/// block observers set (so mha leaves its fused kernel) under ConservativeModeGuard. ValueError
/// naming the layer for a variant without probabilities or without head_mask.
class HeadRelevance {
 public:
  explicit HeadRelevance(const Probe& probe);  ///< relevance of `probe`'s heads, nothing accumulated yet
  void add(const data::Batch& batch);  ///< one LRP pass over `batch`, adding each head's relevance
  const HeadMatrix& raw() const { return sum_; }  ///< sums of each head's relevance over the batches
  HeadMatrix normalized() const;  ///< each layer divided by the sum of |R| over its heads
  const RelevanceCheck& check() const { return check_; }  ///< the conservation sums of the batches added

 private:
  Probe probe_;
  HeadMatrix sum_;
  RelevanceCheck check_;
};

/// Per-layer normalisations (a layer of zeros stays zeros).
HeadMatrix normalize_l2(const HeadMatrix& m);
HeadMatrix normalize_l1(const HeadMatrix& m);  ///< see normalize_l2

}  // namespace attnlab::analysis
/// @}

/// @file
/// `attnlab explain`'s model, separate from its printing so that tests check the numbers: one
/// attention layer run forward once (or one decoding step, ExplainOptions) on a small real float32
/// input with the op trace
/// (autograd/trace.hpp) on, each traced op turned into a step with its FLOPs and the bytes of
/// the buffer it creates, plus the peak bytes the forward held (allocator) and the same figures
/// for dense `mha` with the same heads and sizes. Each step names the module it ran in, as a
/// path from the layer, "attention": the module whose parameters the op reads
/// ("attention.q_proj" for a projection's matmul and bias add, OpTrace::label_parameter), or
/// "attention" itself for ops on activations alone (head splits, the attention core, softmax).
///
/// FLOP convention (docs/cli.md): a multiply-add is 2 FLOPs, so matmul (.., m, k) x (.., k, n)
/// costs 2 m n k per batch entry; elementwise ops cost one FLOP per output element; reductions
/// (sum, cumsum) one per input element; softmax and log_softmax 5 per element (max, subtract,
/// exp, sum, divide); views and copies (reshape, permute, slice, expand, cat, gather, ...) cost
/// none. The fused tiled kernel (tile_attention, behind mha and the positional patterns) counts
/// its allowed (query, key) pairs times 2 dk + 5 + 2 dv, the same as the composed formula
/// restricted to those pairs. Other fused kernels with no formula here (causal_product,
/// fourier_mix, ...) are listed with FLOPs unknown and left out of the total, which says so.
/// @ingroup cli
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/trace.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// One traced op of `attnlab explain`, with its module and FLOPs.
struct ExplainStep {
  TracedOp op;               ///< the op as traced
  std::string module;        ///< "attention", "attention.q_proj", ...
  int64_t flops = 0;         ///< floating-point operations of the op
  bool flops_known = true;   ///< false: the op's FLOPs are not counted
  std::string does;    ///< what the step computes, in words (step_description)
};

/// What to trace. composed: the layer's forward with need_weights = true, so a variant with a
/// fused kernel (mha's tile_attention) runs its composed twin, matmul -> softmax -> matmul, and the
/// scores, softmax and P V appear as separate steps. causal: the forward with causal = true (the
/// mask). decode > 0: one incremental decoding step (Attention::forward_step, eval mode) of one new
/// position per sequence against a cache already holding `decode` positions, instead of the
/// forward; `seq` is then unused.
struct ExplainOptions {
  bool composed = false;  ///< trace the composed twin (QK^T, softmax, PV as separate steps)
  bool causal = false;    ///< run the forward with the causal mask
  int64_t decode = 0;     ///< > 0: trace one decoding step against a cache of this many positions
};

/// What `attnlab explain` prints: every step of a layer's forward, with totals.
struct ExplainReport {
  std::string spec;  ///< the layer's pinned spec (every size resolved)
  int64_t d_model = 0;             ///< D
  int64_t seq = 0;                 ///< N
  int64_t batch = 0;               ///< B
  std::vector<ExplainStep> steps;  ///< the forward's ops, in order
  int64_t flops = 0;           ///< sum over steps with known FLOPs
  int64_t unknown_steps = 0;   ///< steps whose FLOPs are not counted
  int64_t bytes_created = 0;   ///< sum of new buffers (views excluded)
  int64_t peak_bytes = 0;      ///< allocator peak above the starting point, during one untraced forward
  int64_t parameter_bytes = 0;  ///< bytes of the layer's parameters
  std::string time_cost;        ///< the variant's declared time cost (VariantSchema)
  std::string memory_cost;      ///< the variant's declared memory cost
  ExplainOptions options;       ///< what was traced
  int64_t cache_bytes = 0;     ///< decode: the bytes the layer's cache holds after the step
  int64_t cache_positions = 0; ///< decode: the positions the cache was made for (decode + 1)
  bool cache_grows = false;    ///< decode: the cache holds numbers per position (not a fixed-size state)
};

/// FLOPs of one traced op under the convention above; `known` false for ops without a formula.
int64_t op_flops(const TracedOp& op, bool* known);
/// Runs make_attention(spec, d_model) forward (eval mode, grad mode on, seed 0) on x (B, N, D),
/// or one decoding step (options.decode). ValueError for a non-positive size.
ExplainReport explain_attention(const std::string& spec, int64_t d_model, int64_t seq, int64_t batch,
                                const ExplainOptions& options = {});
/// What step_description knows besides the step: the number of keys M, the shape of the last
/// softmax's output (empty before one) and whether the forward runs with a mask.
struct StepContext {
  int64_t keys = 0;      ///< M, the number of keys
  Dims weights;          ///< shape of the last softmax's output (empty before one)
  bool masked = false;   ///< the forward runs with a mask
};
/// A step in words, from its op, module and shapes alone (no variant is named): a projection's
/// matmul, the weighted sum P V (a matmul whose first input is the last softmax's output), the
/// scores Q K^T (a matmul whose output's last dim is M), a scale, the softmax (with the mask the
/// engine applies inside it), a per-head factor, head splits and merges, the fused kernel.
std::string step_description(const ExplainStep& step, const StepContext& context);
/// The dense mha spec with the same heads, key and value sizes as `pinned_spec` (the sizes the
/// variant has; mha's defaults for the rest).
std::string dense_twin_spec(const std::string& pinned_spec, int64_t d_model);

}  // namespace attnlab::cli
/// @}

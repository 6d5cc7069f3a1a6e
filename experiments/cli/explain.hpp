/// @file
/// `attnlab explain`'s model, separate from its printing so that tests check the numbers: one
/// attention layer run forward once on a small real float32 input with the op trace
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
};

/// FLOPs of one traced op under the convention above; `known` false for ops without a formula.
int64_t op_flops(const TracedOp& op, bool* known);
/// Runs make_attention(spec, d_model) forward (eval mode, grad mode on, seed 0) on x (B, N, D).
ExplainReport explain_attention(const std::string& spec, int64_t d_model, int64_t seq, int64_t batch);
/// The dense mha spec with the same heads, key and value sizes as `pinned_spec` (the sizes the
/// variant has; mha's defaults for the rest).
std::string dense_twin_spec(const std::string& pinned_spec, int64_t d_model);

}  // namespace attnlab::cli
/// @}

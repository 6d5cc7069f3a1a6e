/// @file
/// An op trace for teaching and cost accounting (`attnlab explain`): while an OpTraceGuard is
/// alive on a thread, every op that records autograd history on that thread (every
/// differentiable primitive whose inputs require a gradient, with grad mode on) appends one
/// TracedOp: its name, its inputs' shapes, its output's shape and dtype, and whether the output
/// lives in storage no earlier op or marked tensor owns (a new buffer rather than a view).
///
/// Each op is also labelled with the module it belongs to, by data flow: label_parameter names
/// the module owning a parameter, and an op reading that parameter, or a tensor computed from
/// that module's parameters alone (the transposed weight of a Linear), carries the module's name.
/// Ops reading no labelled parameter have an empty label (the caller's root module).
///
/// Hooked in set_history (variable.cpp): with no trace active the cost is one thread-local
/// pointer test per recorded op. Ops run without history (grad mode off, or no input requiring
/// a gradient: masks, constants) are not traced, so a caller who wants a layer's whole data
/// path runs it with grad mode on and the input marked requires_grad.
/// @ingroup autograd
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tensor/tensor.hpp"

/// @addtogroup autograd
/// @{
namespace attnlab {

struct Node;

/// One traced op: name, shapes, dtype, whether it made a new buffer, FLOPs and module.
struct TracedOp {
  std::string name;           ///< the primitive's name, as in derivatives.cpp ("matmul", "softmax")
  std::vector<Dims> inputs;   ///< input shapes, in argument order (empty Dims for an undefined input)
  Dims output;  ///< the output's shape
  DType dtype = kFloat32;  ///< the output's dtype
  bool new_storage = false;   ///< false: a view of an earlier tensor (reshape, permute, slice, ...)
  int64_t flops = -1;         ///< set by a fused kernel that knows its own count; -1 = not given
  std::string module;         ///< the module of a labelled parameter it reads (label_parameter), or ""
  int64_t bytes() const { return new_storage ? numel_of(output) * int64_t(itemsize(dtype)) : 0; }  ///< bytes of the new buffer (0 for a view)
};

/// The ops recorded on a thread while an OpTraceGuard on it is alive (see the file's description).
class OpTrace {
 public:
  /// Tensors that exist before the traced code runs (inputs, parameters, buffers): ops that
  /// return views of them are not counted as new buffers.
  void mark_existing(const Tensor& t);
  /// Marks parameter `p` existing and names its module ("q_proj" for "q_proj.weight"); a
  /// parameter that requires no gradient records no history and so labels nothing.
  void label_parameter(const Tensor& p, const std::string& module);
  void append(const Tensor& result, const std::shared_ptr<Node>& node);  ///< records one op (called from set_history)
  /// A fused op (tile_attention) states the FLOPs of the op it just recorded.
  void annotate_flops(int64_t flops) {
    if (!ops_.empty()) ops_.back().flops = flops;
  }
  const std::vector<TracedOp>& ops() const { return ops_; }  ///< the traced ops, in execution order
  /// While this trace is active, GradMode::is_enabled() is true even inside a NoGradGuard, so
  /// code that turns recording off itself (Attention::forward_step) records, and is traced, like
  /// any forward (`attnlab explain --decode`). That code then builds a graph it otherwise would
  /// not; the trace's owner discards the results. Activate it with grad mode on, so that a guard
  /// inside restores the mode it found.
  bool through_no_grad = false;

 private:
  std::vector<TracedOp> ops_;
  /// Storages already seen; held alive so that a freed storage's address is never reused for a
  /// new one during the trace (which would make a new buffer look like a view).
  std::unordered_set<const Storage*> seen_;
  std::vector<std::shared_ptr<Storage>> held_;
  /// Gradient nodes of labelled parameters and of tensors computed from one module's parameters
  /// alone, with that module; held alive so that their addresses stay unique.
  std::unordered_map<const Node*, std::string> module_of_;
  std::vector<std::shared_ptr<Node>> held_nodes_;
};

/// Traces the ops this thread records while alive; guards nest (the innermost trace wins).
class OpTraceGuard {
 public:
  explicit OpTraceGuard(OpTrace& trace);  ///< starts tracing into `trace` on this thread
  ~OpTraceGuard();
  OpTraceGuard(const OpTraceGuard&) = delete;
  OpTraceGuard& operator=(const OpTraceGuard&) = delete;

 private:
  OpTrace* previous_;
};

/// The trace active on this thread, or null.
OpTrace* active_op_trace();

}  // namespace attnlab
/// @}

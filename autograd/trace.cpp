// The op trace (trace.hpp): one thread-local pointer, set by OpTraceGuard, read by set_history.
#include "autograd/trace.hpp"

#include "autograd/node.hpp"

namespace attnlab {
namespace {
thread_local OpTrace* current_trace = nullptr;
}

OpTrace* active_op_trace() { return current_trace; }

OpTraceGuard::OpTraceGuard(OpTrace& trace) : previous_(current_trace) { current_trace = &trace; }
OpTraceGuard::~OpTraceGuard() { current_trace = previous_; }

void OpTrace::mark_existing(const Tensor& t) {
  if (!t.defined()) return;
  if (seen_.insert(t.storage().get()).second) held_.push_back(t.storage());
}

void OpTrace::append(const Tensor& result, const Node& node) {
  TracedOp op;
  op.name = node.name;
  op.inputs.assign(node.shapes.begin(), node.shapes.end());
  op.output = result.shape();
  op.dtype = result.dtype();
  op.new_storage = seen_.insert(result.storage().get()).second;
  if (op.new_storage) held_.push_back(result.storage());
  ops_.push_back(std::move(op));
}

}  // namespace attnlab

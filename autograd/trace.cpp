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

void OpTrace::label_parameter(const Tensor& p, const std::string& module) {
  mark_existing(p);
  // The parameter's AccumulateGrad node: the traced ops reuse it while it is held here.
  Edge edge = gradient_edge(p);
  if (!edge.node) return;
  module_of_[edge.node.get()] = module;
  held_nodes_.push_back(std::move(edge.node));
}

void OpTrace::append(const Tensor& result, const std::shared_ptr<Node>& node) {
  TracedOp op;
  op.name = node->name;
  op.inputs.assign(node->shapes.begin(), node->shapes.end());
  op.output = result.shape();
  op.dtype = result.dtype();
  op.new_storage = seen_.insert(result.storage().get()).second;
  if (op.new_storage) held_.push_back(result.storage());
  // The first labelled input names the op's module; when every input with history is of that
  // one module, the result is labelled too.
  const std::string* module = nullptr;
  bool one_module = true;
  for (const Edge& e : node->next) {
    if (!e.node) continue;
    auto it = module_of_.find(e.node.get());
    if (it == module_of_.end()) {
      one_module = false;
    } else if (!module) {
      module = &it->second;
    } else if (*module != it->second) {
      one_module = false;
    }
  }
  if (module) {
    op.module = *module;
    if (one_module) {
      module_of_[node.get()] = op.module;
      held_nodes_.push_back(node);
    }
  }
  ops_.push_back(std::move(op));
}

}  // namespace attnlab

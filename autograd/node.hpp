/// @file
/// The autograd graph. Every differentiable op that sees an input requiring a gradient records
/// one Node: its backward formula (a lambda written beside the forward call in
/// derivatives.cpp), one edge per input to the node that produced that input, and each input's
/// shape so that the engine can reduce a broadcast gradient (sum_to) once, for every op.
///
/// Every node has exactly one output; ops with several outputs (split, chunk, max with indices)
/// are built from single-output ones. Leaves that require a gradient get an AccumulateGrad node
/// that adds incoming gradients into the leaf's .grad().
/// @ingroup autograd
#pragma once
#include <functional>
#include <memory>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "autograd/grad_mode.hpp"
#include "tensor/pool.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup autograd
/// @{
namespace attnlab {

/// Vectors a node owns or returns come from the small-object pool (tensor/pool.hpp): recording
/// an op and running its backward then call no system allocator.
using Grads = PoolVector<Tensor>;
using Hook = std::function<Tensor(const Tensor&)>;  ///< A tensor hook: takes a gradient and returns the gradient to use instead (Tensor::register_hook).

struct Node;
/// Where a gradient flows: the node that produced one input of an op.
struct Edge {
  std::shared_ptr<Node> node;  ///< null when the input needs no gradient
};

/// One recorded op in the autograd graph (see the file's description).
struct Node {
  explicit Node(const char* name) : name(name) {}  ///< `name`: the op's name, as in derivatives.cpp
  virtual ~Node();  ///< iterative: frees a deep graph without deep recursion (engine.cpp)

  const char* name;  ///< the op's name ("matmul", "AccumulateGrad", ...)
  PoolVector<Edge> next;     ///< one per input
  PoolVector<Dims> shapes;   ///< input shapes, for the engine's broadcast reduction
  PoolVector<DType> dtypes;  ///< input dtypes, checked against returned gradients
  std::vector<std::pair<int, Hook>> pre_hooks;  ///< tensor hooks on this node's output gradient

  /// Gradients for each input from the gradient of the output (undefined where not needed).
  virtual Grads apply(Tensor grad) = 0;
  /// Frees saved tensors after a backward that does not retain the graph.
  virtual void release() {}
  bool released = false;  ///< true once release() freed the saved tensors (a second backward then fails)

  /// Engine scratch, valid during one backward pass.
  Tensor pending;
  int dependencies = 0;  ///< engine scratch: gradients still to arrive in this pass
  uint64_t visit = 0;  ///< engine scratch: the pass that last visited this node

  bool needs_grad(size_t i) const { return i < next.size() && next[i].node != nullptr; }  ///< whether input i needs a gradient (has an edge)
};

/// The autograd state of a tensor, created on first use (autograd_meta).
class AutogradMeta {
 public:
  bool requires_grad = false;  ///< a leaf that requires a gradient (non-leaves: grad_fn set)
  Tensor grad;  ///< the accumulated gradient of a leaf (or of a non-leaf with retains_grad)
  std::shared_ptr<Node> grad_fn;           ///< null for leaves
  std::weak_ptr<Node> grad_accumulator;    ///< leaves only
  std::vector<std::pair<int, Hook>> hooks; ///< leaves only (non-leaf hooks live on grad_fn)
  bool retains_grad = false;  ///< Tensor::retain_grad() was called on a non-leaf
  int next_hook_id = 0;  ///< the id the next registered hook gets (for remove_hook)
};

/// Adds gradients into a leaf's .grad(), after running the leaf's hooks.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::shared_ptr<AutogradMeta> meta) : Node("AccumulateGrad"), meta(std::move(meta)) {}  ///< the leaf whose .grad() it adds into
  Grads apply(Tensor grad) override;
  std::shared_ptr<AutogradMeta> meta;  ///< the leaf's metadata
};

/// A node whose backward formula is the lambda F(grad, result, node) -> Grads.
template <class F>
struct LambdaNode : Node {
  LambdaNode(const char* name, F f) : Node(name), backward(std::move(f)) {}  ///< a node named `name` running `f` on backward
  Grads apply(Tensor grad) override { return (*backward)(grad, result, *this); }
  void release() override {
    backward.reset();
    result = Tensor();
    released = true;
  }
  std::optional<F> backward;  ///< the formula; empty after release()
  Tensor result;  ///< the op's output without history, when the formula needs it
};

/// The autograd metadata of t, created on first use.
AutogradMeta& autograd_meta(const Tensor& t);
AutogradMeta* autograd_meta_if(const Tensor& t);  ///< The autograd metadata of t, or null when it has none yet.
/// Whether ops on these inputs must be recorded.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
/// The edge a gradient for t flows into: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& t);
/// Attaches `node` as the producer of `result` (which then requires grad).
void set_history(const Tensor& result, std::shared_ptr<Node> node);

/// Whether record() keeps the op's output (detached) for its formula.
enum class SaveResult { No, Yes };

/// Records `result` = op(inputs) with backward formula `backward` when any input requires a
/// gradient and grad mode is on; otherwise records nothing. Returns `result`. The inputs come as a
/// braced list ({a, b}: no vector is built) or as any contiguous range, a vector say (cat, stack).
template <class F>
Tensor record(const char* name, Tensor result, std::span<const Tensor> inputs, F backward,
              SaveResult save = SaveResult::No) {
  if (!GradMode::is_enabled()) return result;
  bool any = false;
  for (const Tensor& t : inputs) any |= t.defined() && t.requires_grad();
  if (!any) return result;
  auto node = make_pooled<LambdaNode<F>>(name, std::move(backward));
  node->next.reserve(inputs.size());  // one pool block each, not one per growth step
  node->shapes.reserve(inputs.size());
  node->dtypes.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node->next.push_back(t.defined() ? gradient_edge(t) : Edge{});
    node->shapes.push_back(t.defined() ? t.shape() : Dims{});
    node->dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  if (save == SaveResult::Yes) node->result = result.detach();
  set_history(result, std::move(node));
  return result;
}
/// record() with the inputs as a braced list: record("mul", out, {a, b}, formula).
template <class F>
Tensor record(const char* name, Tensor result, std::initializer_list<Tensor> inputs, F backward,
              SaveResult save = SaveResult::No) {
  return record(name, std::move(result), std::span<const Tensor>(inputs.begin(), inputs.size()), std::move(backward),
                save);
}

/// Runs backward from `roots` with the given output gradients.
void run_backward(std::span<const Tensor> roots, std::span<const Tensor> grads, bool retain_graph);

}  // namespace attnlab
/// @}

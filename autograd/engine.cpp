// The backward engine. One pass counts, for every node reachable from the roots, how many
// edges lead into it; then nodes run in an order where each runs only after every consumer of
// its output has delivered its gradient. Gradients are reduced to each input's shape here,
// once, for all ops (the formulas never sum over broadcast dims themselves).
#include <atomic>

#include "autograd/node.hpp"
#include "autograd/trace.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {
namespace {

thread_local bool grad_enabled = true;
thread_local bool conservative_enabled = false;
std::atomic<uint64_t> epoch{0};

void accumulate(Tensor& into, Tensor g) {
  if (!into.defined()) {
    into = std::move(g);
  } else if (into.use_count() == 1 && into.storage().use_count() == 1 && into.is_contiguous() &&
             into.dtype() == g.dtype()) {
    kernels::binary_(kernels::Binary::Add, into, g, "backward");  // sole owner: add in place
  } else {
    into = kernels::binary(kernels::Binary::Add, into, g, "backward");
  }
}

}  // namespace

// Releasing a node's edges one by one would destroy a chain of nodes recursively, one stack
// frame per node, and overflow the stack on graphs ~100,000 nodes deep. Instead, a dying node
// moves its edges onto its thread's drain stack, and the outermost ~Node on the thread drains
// it: a node popped there whose last reference the stack held dies in turn, and its own
// destructor (like that of any node freed meanwhile, say through a tensor a formula saved) only
// adds its edges to the stack. The stack is reused, so freeing a graph allocates nothing.
namespace {
struct DrainStack {
  std::vector<std::shared_ptr<Node>> nodes;
  bool draining = false;
  ~DrainStack();
};
thread_local bool drain_stack_gone = false;  // trivially destructible: readable during thread exit
DrainStack::~DrainStack() { drain_stack_gone = true; }

void take_edges(Node& n, std::vector<std::shared_ptr<Node>>& stack) {
  for (Edge& e : n.next)
    if (e.node) stack.push_back(std::move(e.node));
}

void drain(std::vector<std::shared_ptr<Node>>& stack) {
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) take_edges(*n, stack);
  }  // n dies here once its edges are on the stack: its destructor finds nothing to recurse into
}
}  // namespace

Node::~Node() {
  bool any = false;
  for (Edge& e : next) any |= e.node != nullptr;
  if (!any) return;  // a leaf's accumulator, or a node already drained
  // (Not "no edge is the last reference": in y = y * y both edges share one reference count,
  // neither is unique, and releasing them one after the other still frees the node they point
  // to, recursively.)
  if (drain_stack_gone) {  // the thread is exiting: a stack of its own
    std::vector<std::shared_ptr<Node>> stack;
    take_edges(*this, stack);
    drain(stack);
    return;
  }
  thread_local DrainStack stack;
  take_edges(*this, stack.nodes);
  if (stack.draining) return;  // an outer ~Node on this thread drains the stack
  stack.draining = true;
  drain(stack.nodes);
  stack.draining = false;
}

bool GradMode::is_enabled() {
  if (grad_enabled) return true;
  const OpTrace* trace = active_op_trace();  // a trace that records through NoGradGuard (trace.hpp)
  return trace && trace->through_no_grad;
}
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }
bool ConservativeMode::is_enabled() { return conservative_enabled; }
void ConservativeMode::set_enabled(bool enabled) { conservative_enabled = enabled; }

Grads AccumulateGrad::apply(Tensor grad) {
  for (auto& [id, hook] : meta->hooks) {
    Tensor r = hook(grad);
    if (r.defined()) grad = r;
  }
  Tensor& g = meta->grad;
  if (!g.defined()) {
    // Adopt the buffer when nobody else can see it; otherwise copy, so that later in-place
    // accumulation never writes into another tensor.
    bool owned = grad.use_count() == 1 && grad.storage().use_count() == 1 && grad.is_contiguous() &&
                 grad.offset() == 0;
    g = owned ? grad : kernels::clone(grad);
  } else {
    kernels::binary_(kernels::Binary::Add, g, grad, "backward (accumulating .grad)");
  }
  return {};
}

void run_backward(std::span<const Tensor> roots, std::span<const Tensor> grads, bool retain_graph) {
  NoGradGuard no_grad;
  const uint64_t visit = ++epoch;
  // The pass's work lists. The outermost backward on a thread reuses the thread's lists, so a
  // steady-state training step allocates none; a backward run from inside a hook gets its own.
  struct Lists {
    std::vector<std::shared_ptr<Node>> nodes;  // keeps every node alive for the pass
    std::vector<Node*> stack, ready;
    std::vector<std::pair<std::shared_ptr<Node>, Tensor>> seeds;
  };
  thread_local Lists reused;
  thread_local int depth = 0;
  Lists fresh;
  Lists& lists = depth == 0 ? reused : fresh;
  struct Depth {
    Lists& l;
    explicit Depth(Lists& l) : l(l) { ++depth; }
    ~Depth() {
      --depth;
      l.nodes.clear();  // drop the nodes now, not at the next backward
      l.stack.clear();
      l.ready.clear();
      l.seeds.clear();
    }
  } depth_guard(lists);
  std::vector<std::shared_ptr<Node>>& nodes = lists.nodes;
  std::vector<Node*>& stack = lists.stack;

  auto discover = [&](const std::shared_ptr<Node>& n) {
    if (n->visit == visit) return;
    n->visit = visit;
    n->dependencies = 0;
    n->pending = Tensor();
    nodes.push_back(n);
    stack.push_back(n.get());
  };

  auto& seeds = lists.seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    if (!root.requires_grad())
      fail<AutogradError>(
          "backward: the tensor of shape {} does not require grad (no input to it had requires_grad set)",
          to_string(root.shape()));
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      if (root.numel() != 1)
        fail<AutogradError>("backward: a gradient is needed for a non-scalar output of shape {}; pass one of the same shape",
                            to_string(root.shape()));
      g = Tensor::empty(root.shape(), root.dtype());
      kernels::fill_(g, 1.0);
    } else if (g.shape() != root.shape() || g.dtype() != root.dtype()) {
      fail<AutogradError>("backward: gradient of shape {} {} does not match the output's shape {} {}",
                          to_string(g.shape()), dtype_name(g.dtype()), to_string(root.shape()),
                          dtype_name(root.dtype()));
    }
    seeds.emplace_back(gradient_edge(root).node, g);
  }
  for (auto& [n, g] : seeds) discover(n);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->next)
      if (e.node) {
        discover(e.node);
        ++e.node->dependencies;
      }
  }

  std::vector<Node*>& ready = lists.ready;
  for (auto& [n, g] : seeds) accumulate(n->pending, g);
  for (auto& [n, g] : seeds)
    if (n->dependencies == 0 && (ready.empty() || ready.back() != n.get())) ready.push_back(n.get());

  try {
    while (!ready.empty()) {
      Node* n = ready.back();
      ready.pop_back();
      Tensor g = std::move(n->pending);
      n->pending = Tensor();
      Grads out;
      if (g.defined()) {
        if (n->released)
          fail<AutogradError>(
              "backward: trying to backward through {} a second time, after its saved tensors were freed; "
              "pass retain_graph=true to the first backward",
              n->name);
        for (auto& [id, hook] : n->pre_hooks) {
          Tensor r = hook(g);
          if (r.defined()) g = r;
        }
        out = n->apply(std::move(g));
        if (!retain_graph) n->release();
      }
      for (size_t i = 0; i < n->next.size(); ++i) {
        Node* child = n->next[i].node.get();
        if (!child) continue;
        if (i < out.size() && out[i].defined()) {
          Tensor gi = std::move(out[i]);
          if (gi.shape() != n->shapes[i]) {
            try {
              gi = kernels::sum_to(gi, n->shapes[i]);
            } catch (const ShapeError&) {
              fail<AutogradError>("backward of {}: gradient of shape {} does not fit input {} of shape {}", n->name,
                                  to_string(gi.shape()), i, to_string(n->shapes[i]));
            }
          }
          if (gi.dtype() != n->dtypes[i])
            fail<AutogradError>("backward of {}: gradient dtype {} differs from input {}'s dtype {}", n->name,
                                dtype_name(gi.dtype()), i, dtype_name(n->dtypes[i]));
          accumulate(child->pending, std::move(gi));
        }
        if (--child->dependencies == 0) ready.push_back(child);
      }
    }
  } catch (...) {
    for (auto& n : nodes) n->pending = Tensor();
    throw;
  }
}

}  // namespace attnlab

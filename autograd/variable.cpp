// The autograd members of Tensor (declared in tensor/tensor.hpp) and the glue between tensors
// and graph nodes.
#include "autograd/node.hpp"
#include "autograd/trace.hpp"
#include "tensor/kernels.hpp"

namespace attnlab {

AutogradMeta* autograd_meta_if(const Tensor& t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

AutogradMeta& autograd_meta(const Tensor& t) {
  if (!t.defined()) fail<ValueError>("autograd: the tensor is undefined");
  auto& m = t.impl()->autograd;
  if (!m) m = make_pooled<AutogradMeta>();
  return *m;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = autograd_meta_if(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    m->grad_accumulator.reset();  // frees the expired accumulator's block for the one made next
    acc = make_pooled<AccumulateGrad>(t.impl()->autograd);
    m->grad_accumulator = acc;
  }
  return {acc};
}

void set_history(const Tensor& result, std::shared_ptr<Node> node) {
  if (OpTrace* trace = active_op_trace()) trace->append(result, node);  // attnlab explain
  AutogradMeta& m = autograd_meta(result);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
}

bool Tensor::requires_grad() const {
  AutogradMeta* m = autograd_meta_if(*this);
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_floating_point())
    fail<DTypeError>("requires_grad_: only floating tensors can require gradients, got {}", dtype_name(dtype()));
  AutogradMeta& m = autograd_meta(*this);
  if (m.grad_fn && !on)
    fail<AutogradError>("requires_grad_: cannot turn off requires_grad of a non-leaf tensor; use detach()");
  m.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  AutogradMeta* m = autograd_meta_if(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined() && (g.shape() != shape() || g.dtype() != dtype()))
    fail<ShapeError>("set_grad: gradient of shape {} {} does not match the tensor's {} {}", to_string(g.shape()),
                     dtype_name(g.dtype()), to_string(shape()), dtype_name(dtype()));
  autograd_meta(*this).grad = g;
}

bool Tensor::is_leaf() const {
  AutogradMeta* m = autograd_meta_if(*this);
  return !m || !m->grad_fn;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  AutogradMeta* m = autograd_meta_if(*this);
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(std::span<const Tensor>(this, 1), std::span<const Tensor>(&grad, 1), retain_graph);
}

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

void Tensor::retain_grad() const {
  if (!requires_grad()) fail<AutogradError>("retain_grad: the tensor does not require grad");
  AutogradMeta& m = autograd_meta(*this);
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep their gradient anyway
  m.retains_grad = true;
  std::weak_ptr<AutogradMeta> weak = impl()->autograd;
  m.grad_fn->pre_hooks.emplace_back(-1, [weak](const Tensor& g) {
    if (auto meta = weak.lock())  // accumulates across backward calls, like a leaf's .grad
      meta->grad = meta->grad.defined() ? kernels::binary(kernels::Binary::Add, meta->grad, g, "retain_grad")
                                        : kernels::clone(g);
    return Tensor();
  });
}

int Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  if (!requires_grad()) fail<AutogradError>("register_hook: the tensor does not require grad");
  AutogradMeta& m = autograd_meta(*this);
  int id = m.next_hook_id++;
  if (m.grad_fn)
    m.grad_fn->pre_hooks.emplace_back(id, std::move(hook));
  else
    m.hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_hook(int handle) const {
  AutogradMeta& m = autograd_meta(*this);
  auto drop = [handle](auto& hooks) {
    std::erase_if(hooks, [handle](const auto& h) { return h.first == handle; });
  };
  drop(m.hooks);
  if (m.grad_fn) drop(m.grad_fn->pre_hooks);
}

}  // namespace attnlab

/// @file
/// nn::Module: the base of every layer and model, modelled on PyTorch's C++ frontend
/// (torch::nn::Module): a module owns named parameters, named buffers and named child modules,
/// registered in its constructor. Everything that walks the tree (named_parameters,
/// state_dict, train/eval, to, zero_grad) follows registration order and produces dotted names
/// such as `blocks.0.attn.q_proj.weight`, so a PyTorch state dict with the same structure
/// loads unchanged.
///
///   struct Mlp : nn::Module {
///     Mlp() {
///       fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
///       fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 2));
///     }
///     Tensor forward(const Tensor& x) { return (*fc2)(relu((*fc1)(x))); }
///     std::shared_ptr<nn::Linear> fc1, fc2;
///   };
///
/// Also here: UnaryModule (the interface of single-input layers), Sequential and ModuleList.
/// @ingroup nn
#pragma once
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.hpp"
#include "tensor/io.hpp"
#include "tensor/random.hpp"  // modules that draw at forward time own a Generator
#include "tensor/tensor.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;  ///< a shared handle to a module (modules live in shared_ptr trees)
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  ///< (dotted name, tensor) pairs in registration order
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;  ///< (dotted name, module) pairs in registration order

/// What load_state_dict did not match (PyTorch's _IncompatibleKeys). Strict loading throws
/// instead of returning anything non-empty.
struct LoadResult {
  std::vector<std::string> missing_keys;     ///< expected by the module, absent from the map
  std::vector<std::string> unexpected_keys;  ///< in the map, unknown to the module
};

/// The base of every layer: parameters, buffers, generators and submodules by name, train/eval, state dicts (PyTorch's nn.Module).
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  /// A module is a tree of shared handles; copying one would silently share its parameters.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (call from the constructor) ----
  /// Registers `t` (floating) as a parameter and sets its requires_grad. Returns the handle the
  /// module keeps; a non-leaf tensor is detached first, so the parameter is always a leaf.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// A buffer is state that is not trained (running statistics, position tables). Persistent
  /// buffers go into state_dict(); non-persistent ones (derived tables) do not.
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  /// Registers `module` as the child `name` and returns it; ValueError for a null module, the module itself or a name taken.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  /// A generator the module draws from while it runs (dropout masks, gate noise), a member of
  /// the module. Generators are not tensors and not in state_dict(); the runner's Trainer saves
  /// them in its checkpoints (as "rng.<dotted name>"), so that a resumed run draws what an
  /// uninterrupted one would. Returns `gen`.
  Generator& register_generator(const std::string& name, Generator& gen);

  // ---- walking the tree (registration order, dotted names) ----
  /// A tensor registered under two names (tied weights) appears once, under its first name,
  /// as in PyTorch's named_parameters(); state_dict() keeps both names.
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;  ///< every buffer, by dotted name
  std::vector<Tensor> parameters(bool recurse = true) const;  ///< named_parameters() without the names
  std::vector<Tensor> buffers(bool recurse = true) const;  ///< named_buffers() without the names
  /// Registered generators, by dotted name ("blocks.0.attention.generator"); each module's own
  /// first, in registration order.
  std::vector<std::pair<std::string, Generator*>> named_generators(bool recurse = true) const;
  NamedModules named_children() const;  ///< the direct children, by name
  std::vector<ModulePtr> children() const;  ///< the direct children
  /// This module (name "") and every descendant, depth first. When this module is not owned by
  /// a shared_ptr, the entry for itself is a non-owning pointer valid while the module lives.
  NamedModules named_modules() const;
  /// The parameter or buffer at a dotted name; ValueError naming the closest miss.
  Tensor get_parameter(const std::string& dotted) const;
  Tensor get_buffer(const std::string& dotted) const;  ///< the buffer at a dotted name; ValueError naming the closest miss
  ModulePtr get_submodule(const std::string& dotted) const;  ///< the module at a dotted name; ValueError naming the closest miss

  // ---- modes and bookkeeping ----
  /// Sets training mode here and in every descendant (Dropout looks at it).
  virtual void train(bool on = true);
  void eval() { train(false); }  ///< train(false)
  bool is_training() const { return training_; }  ///< whether the module is in training mode
  /// Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();
  /// Converts every floating parameter and buffer (and any gradient) to `dtype` in place:
  /// handles held elsewhere (members, an optimizer) stay valid and keep requires_grad.
  void to(DType dtype);
  /// The tensor op attnlab::to, so that code inside a module can write to(x, dtype) unqualified
  /// (the member above would otherwise hide it).
  static Tensor to(const Tensor& x, DType dtype) { return attnlab::to(x, dtype); }
  /// Elements in all (unique) parameters; with trainable_only, only those requiring grad.
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- state ----
  /// Parameters and persistent buffers by dotted name. The tensors share memory with the
  /// module (as in PyTorch): clone them to keep a snapshot.
  TensorMap state_dict() const;
  /// Copies values in place (converted to each tensor's dtype). Validates everything before
  /// copying anything. Shape mismatches always throw ValueError; in strict mode missing and
  /// unexpected keys do too, all three kinds listed in one message. Non-strict loading copies
  /// what matches and reports the rest.
  LoadResult load_state_dict(const TensorMap& state, bool strict = true);
  /// state_dict() to / from a safetensors file.
  void save(const std::string& path) const;
  LoadResult load(const std::string& path, bool strict = true);  ///< load_state_dict() of the tensors in a safetensors file (FileError for the file)

  // ---- printing ----
  /// The class name printed by str(), e.g. "Linear".
  virtual std::string type_name() const { return "Module"; }
  /// Options printed after the name, e.g. "in_features=4, out_features=8, bias=true".
  virtual std::string extra_repr() const { return ""; }
  /// The module tree with each parameter's shape, PyTorch repr style.
  std::string str() const;

 protected:
  void add_child(const std::string& name, ModulePtr module);  ///< register_module without the type; ValueError for a null module, the module itself or a name taken

 private:
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void collect_modules(const std::string& prefix, NamedModules& out) const;
  void print(std::string& out, int indent) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, Generator*>> generators_;  ///< members of this module
  NamedModules children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);  ///< writes m.str()

/// A layer with one tensor input and one tensor output, so that Sequential can chain it.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;  ///< the layer's output for x
  Tensor operator()(const Tensor& x) { return forward(x); }  ///< forward(x)
};

/// Runs its children "0", "1", ... in order.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers);  ///< the layers, in order
  void push_back(std::shared_ptr<UnaryModule> layer);  ///< appends a layer as the next child
  size_t size() const { return layers_.size(); }  ///< the number of layers
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const;  ///< layer i; IndexError when out of range
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

/// A list of modules of any kind, named "0", "1", ... (PyTorch's ModuleList).
class ModuleList : public Module {
 public:
  ModuleList() = default;
  void push_back(ModulePtr module);  ///< appends a module as the next child
  size_t size() const { return items_.size(); }  ///< the number of modules
  const ModulePtr& operator[](size_t i) const;  ///< module i; IndexError when out of range
  /// Element i as a T; ValueError if it is another kind of module.
  template <class T>
  std::shared_ptr<T> at(size_t i) const {
    auto p = std::dynamic_pointer_cast<T>((*this)[i]);
    if (!p) wrong_type(i);
    return p;
  }
  auto begin() const { return items_.begin(); }  ///< iteration over the modules
  auto end() const { return items_.end(); }  ///< iteration over the modules
  std::string type_name() const override { return "ModuleList"; }

 private:
  [[noreturn]] void wrong_type(size_t i) const;
  std::vector<ModulePtr> items_;
};

}  // namespace attnlab::nn
/// @}

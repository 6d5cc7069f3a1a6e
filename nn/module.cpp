// nn::Module, Sequential and ModuleList (see module.hpp). The tree is walked depth first in
// registration order, a module's own entries before its children's, exactly like
// torch.nn.Module's named_parameters() and state_dict().
#include "nn/module.hpp"

#include <algorithm>
#include <set>

#include "autograd/ops.hpp"

namespace attnlab::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string list_of(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + ("\"" + x + "\"");
  return s;
}

}  // namespace

// ============================ registration ============================

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty()) fail<ValueError>("{}: the name must not be empty ({})", what, type_name());
  if (name.find('.') != std::string::npos)
    fail<ValueError>("{}: name \"{}\" contains '.', which separates levels of dotted names ({})", what, name,
                     type_name());
  bool taken = std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; }) ||
               std::any_of(buffers_.begin(), buffers_.end(), [&](const auto& b) { return b.name == name; }) ||
               std::any_of(generators_.begin(), generators_.end(), [&](const auto& g) { return g.first == name; }) ||
               std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  if (taken) fail<ValueError>("{}: \"{}\" is already registered in this {}", what, name, type_name());
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (!t.defined()) fail<ValueError>("register_parameter: parameter \"{}\" is an undefined tensor", name);
  if (!t.is_floating_point())
    fail<DTypeError>("register_parameter: parameter \"{}\" must be floating (float32 or float64), got {}", name,
                     dtype_name(t.dtype()));
  if (!t.is_leaf()) t = t.detach();
  t.requires_grad_(requires_grad);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "register_buffer");
  if (!t.defined()) fail<ValueError>("register_buffer: buffer \"{}\" is an undefined tensor", name);
  if (t.requires_grad()) t = t.detach();
  buffers_.push_back({name, t, persistent});
  return t;
}

Generator& Module::register_generator(const std::string& name, Generator& gen) {
  check_new_name(name, "register_generator");
  generators_.emplace_back(name, &gen);
  return gen;
}

void Module::add_child(const std::string& name, ModulePtr module) {
  check_new_name(name, "register_module");
  if (!module) fail<ValueError>("register_module: module \"{}\" is null", name);
  if (module.get() == this) fail<ValueError>("register_module: a module cannot be its own child (\"{}\")", name);
  children_.emplace_back(name, std::move(module));
}

// ============================ walking the tree ============================

void Module::collect_modules(const std::string& prefix, NamedModules& out) const {
  for (const auto& [name, child] : children_) {
    std::string full = join(prefix, name);
    out.emplace_back(full, child);
    child->collect_modules(full, out);
  }
}

NamedModules Module::named_modules() const {
  // A module not owned by a shared_ptr gets a non-owning (aliasing, empty) pointer to itself.
  // named_modules() is const but hands out mutable children, like PyTorch's; the same holds
  // for the entry for this module.
  Module* me = const_cast<Module*>(this);
  ModulePtr self = me->weak_from_this().lock();
  if (!self) self = ModulePtr(ModulePtr(), me);
  NamedModules out{{"", self}};
  collect_modules("", out);
  return out;
}

NamedModules Module::named_children() const { return children_; }

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  auto visit = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, t] : m.params_)
      if (seen.insert(t.impl()).second) out.emplace_back(join(prefix, name), t);
  };
  if (!recurse) {
    visit("", *this);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) visit(prefix, *m);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  auto visit = [&](const std::string& prefix, const Module& m) {
    for (const auto& b : m.buffers_)
      if (seen.insert(b.tensor.impl()).second) out.emplace_back(join(prefix, b.name), b.tensor);
  };
  if (!recurse) {
    visit("", *this);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) visit(prefix, *m);
  return out;
}

std::vector<std::pair<std::string, Generator*>> Module::named_generators(bool recurse) const {
  std::vector<std::pair<std::string, Generator*>> out;
  auto visit = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, gen] : m.generators_) out.emplace_back(join(prefix, name), gen);
  };
  if (!recurse) {
    visit("", *this);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) visit(prefix, *m);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(p.second);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& b : named_buffers(recurse)) out.push_back(b.second);
  return out;
}

ModulePtr Module::get_submodule(const std::string& dotted) const {
  ModulePtr cur = named_modules()[0].second;
  if (dotted.empty()) return cur;
  std::string path;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    auto it = std::find_if(cur->children_.begin(), cur->children_.end(), [&](const auto& c) { return c.first == part; });
    if (it == cur->children_.end())
      fail<ValueError>("get_submodule: {} has no child \"{}\" (looking up \"{}\")",
                       path.empty() ? type_name() : "\"" + path + "\"", part, dotted);
    path = join(path, part);
    cur = it->second;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Tensor Module::get_parameter(const std::string& dotted) const {
  size_t dot = dotted.rfind('.');
  ModulePtr owner = dot == std::string::npos ? named_modules()[0].second : get_submodule(dotted.substr(0, dot));
  std::string leaf = dot == std::string::npos ? dotted : dotted.substr(dot + 1);
  for (const auto& [name, t] : owner->params_)
    if (name == leaf) return t;
  fail<ValueError>("get_parameter: no parameter \"{}\" in {}", dotted, type_name());
}

Tensor Module::get_buffer(const std::string& dotted) const {
  size_t dot = dotted.rfind('.');
  ModulePtr owner = dot == std::string::npos ? named_modules()[0].second : get_submodule(dotted.substr(0, dot));
  std::string leaf = dot == std::string::npos ? dotted : dotted.substr(dot + 1);
  for (const auto& b : owner->buffers_)
    if (b.name == leaf) return b.tensor;
  fail<ValueError>("get_buffer: no buffer \"{}\" in {}", dotted, type_name());
}

// ============================ modes and bookkeeping ============================

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.set_grad(Tensor());
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    fail<DTypeError>("Module::to: modules convert to a floating dtype (float32 or float64), got {}", dtype_name(dtype));
  NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) {
    if (!t.is_floating_point() || t.dtype() == dtype) return;
    Tensor g = t.grad();
    Tensor g2 = g.defined() ? attnlab::to(g.detach(), dtype) : Tensor();
    t.set_data(attnlab::to(t.detach(), dtype));
    if (g.defined()) t.set_grad(g2);
  };
  for (auto& [name, p] : named_parameters()) convert(p);
  for (auto& [name, b] : named_buffers()) convert(b);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

// ============================ state ============================

TensorMap Module::state_dict() const {
  TensorMap out;
  for (const auto& [prefix, m] : named_modules()) {
    for (const auto& [name, t] : m->params_) out[join(prefix, name)] = t.detach();
    for (const auto& b : m->buffers_)
      if (b.persistent) out[join(prefix, b.name)] = b.tensor.detach();
  }
  return out;
}

LoadResult Module::load_state_dict(const TensorMap& state, bool strict) {
  TensorMap own = state_dict();
  LoadResult result;
  std::vector<std::string> mismatched;
  for (const auto& [name, t] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      result.missing_keys.push_back(name);
    } else if (!it->second.defined()) {
      mismatched.push_back(fmt::format("\"{}\": the given tensor is undefined", name));
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(fmt::format("\"{}\": checkpoint has shape {}, the module has {}", name,
                                       to_string(it->second.shape()), to_string(t.shape())));
    }
  }
  for (const auto& [name, t] : state)
    if (!own.count(name)) result.unexpected_keys.push_back(name);

  const bool refuse = !mismatched.empty() || (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty()));
  if (refuse) {
    std::string msg = fmt::format("load_state_dict: error(s) loading the state dict into {}:", type_name());
    if (strict && !result.missing_keys.empty()) msg += "\n  missing keys: " + list_of(result.missing_keys);
    if (strict && !result.unexpected_keys.empty()) msg += "\n  unexpected keys: " + list_of(result.unexpected_keys);
    for (const auto& m : mismatched) msg += "\n  shape mismatch for " + m;
    fail<ValueError>("{}", msg);
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) copy_(t, it->second);
  }
  return result;
}

void Module::save(const std::string& path) const { save_safetensors(path, state_dict()); }

LoadResult Module::load(const std::string& path, bool strict) { return load_state_dict(load_safetensors(path), strict); }

// ============================ printing ============================

void Module::print(std::string& out, int indent) const {
  const std::string pad(indent, ' ');
  std::string extra = extra_repr();
  out += type_name() + "(" + extra;
  bool has_body = !params_.empty() || !buffers_.empty() || !children_.empty();
  if (!has_body) {
    out += ")";
    return;
  }
  out += "\n";
  for (const auto& [name, t] : params_)
    out += fmt::format("{}  {}: {} {}{}\n", pad, name, to_string(t.shape()), dtype_name(t.dtype()),
                       t.requires_grad() ? "" : " (frozen)");
  for (const auto& b : buffers_)
    out += fmt::format("{}  {}: {} {} (buffer{})\n", pad, b.name, to_string(b.tensor.shape()),
                       dtype_name(b.tensor.dtype()), b.persistent ? "" : ", not saved");
  for (const auto& [name, child] : children_) {
    out += pad + "  (" + name + "): ";
    child->print(out, indent + 2);
    out += "\n";
  }
  out += pad + ")";
}

std::string Module::str() const {
  std::string out;
  print(out, 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

// ============================ Sequential ============================

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> layers) {
  for (const auto& l : layers) push_back(l);
}

void Sequential::push_back(std::shared_ptr<UnaryModule> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](size_t i) const {
  if (i >= layers_.size()) fail<IndexError>("Sequential: index {} is out of range for {} layers", i, layers_.size());
  return layers_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

// ============================ ModuleList ============================

void ModuleList::push_back(ModulePtr module) {
  register_module(std::to_string(items_.size()), module);
  items_.push_back(std::move(module));
}

const ModulePtr& ModuleList::operator[](size_t i) const {
  if (i >= items_.size()) fail<IndexError>("ModuleList: index {} is out of range for {} modules", i, items_.size());
  return items_[i];
}

void ModuleList::wrong_type(size_t i) const {
  fail<ValueError>("ModuleList::at: element {} is a {}, not the requested type", i, items_[i]->type_name());
}

}  // namespace attnlab::nn

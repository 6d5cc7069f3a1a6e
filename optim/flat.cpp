// FlatStore: building the flat layout, moving parameters into it, and binding state slices.
#include "optim/flat.hpp"

#include "tensor/kernels.hpp"

namespace attnlab::optim::detail {

FlatStore::FlatStore(std::vector<std::string> buffers) : buffer_names_(std::move(buffers)) {}

size_t FlatStore::index_of(DType dtype) {
  if (dtype == kFloat32) return 0;
  if (dtype == kFloat64) return 1;
  fail<DTypeError>("optimizer flat storage: parameters must be float32 or float64, got {}", dtype_name(dtype));
}

FlatStore::Entry FlatStore::entry_of(const Tensor& p) {
  return {p.impl(), p.storage().get(), p.offset(), p.shape(), p.strides(), p.dtype()};
}

void FlatStore::sync(const std::vector<ParamGroup>& groups, const char* op) {
  // A few comparisons per parameter: cheap enough for every step.
  bool same = !signature_.empty();
  size_t k = 0;
  for (const ParamGroup& group : groups) {
    for (const Tensor& p : group.params) {
      same = same && k < signature_.size() && signature_[k] == entry_of(p);
      ++k;
    }
  }
  if (!same || k != signature_.size()) rebuild(groups, op);
}

void FlatStore::rebuild(const std::vector<ParamGroup>& groups, const char* op) {
  const std::array<PerDType, 2> old = flat_;  // keeps the old storage alive while we copy out of it
  // A parameter already in the old flat storage may move again only when nothing but the
  // parameters themselves views that storage (a view taken by the user, or saved by a live
  // autograd graph, would otherwise keep reading the old memory).
  std::array<bool, 2> old_private = {false, false};
  for (size_t d = 0; d < 2; ++d) {
    if (!old[d].params.defined()) continue;
    long residents = 0;
    for (const ParamGroup& group : groups)
      for (const Tensor& p : group.params)
        if (p.storage() == old[d].params.storage()) ++residents;
    old_private[d] = old[d].params.storage().use_count() == 1 + residents;
  }

  struct Move {
    Tensor param;
    int64_t offset;
  };
  std::array<std::vector<Move>, 2> moves;
  std::array<int64_t, 2> moved = {0, 0}, state = {0, 0};
  slots_.clear();
  for (const ParamGroup& group : groups) {
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      const size_t d = index_of(p.dtype());
      // Two slots for one parameter would update it twice in one parallel pass (a data race).
      if (!slots_.emplace(p.impl(), Slot{p.dtype(), state[d]}).second)
        fail<ValueError>("{}: parameter '{}' appears more than once in the parameter groups", op,
                         i < group.names.size() ? group.names[i] : fmt::format("#{}", i));
      state[d] += p.numel();
      const bool in_old = old[d].params.defined() && p.storage() == old[d].params.storage();
      const bool movable = p.is_contiguous() && (in_old ? old_private[d] : p.storage().use_count() == 1);
      if (!movable) continue;
      moves[d].push_back({p, moved[d]});
      moved[d] += p.numel();
    }
  }

  for (size_t d = 0; d < 2; ++d) {
    const DType dtype = d == 0 ? kFloat32 : kFloat64;
    PerDType& f = flat_[d];
    f.params = moved[d] > 0 ? Tensor::empty({moved[d]}, dtype) : Tensor();  // (moved numel,)
    for (const Move& m : moves[d]) {
      Tensor slice = f.params.as_strided(m.param.shape(), contiguous_strides(m.param.shape()), m.offset);
      kernels::copy_(slice, m.param);
      m.param.set_data(slice);  // every handle of this parameter now reads the flat storage
    }
    // Uninitialised: bind_state writes every slice before it is used.
    f.buffers.clear();
    if (state[d] > 0)
      for (size_t b = 0; b < buffer_names_.size(); ++b) f.buffers.push_back(Tensor::empty({state[d]}, dtype));
  }
  signature_.clear();
  for (const ParamGroup& group : groups)
    for (const Tensor& p : group.params) signature_.push_back(entry_of(p));
}

Tensor FlatStore::parameters(DType dtype) const { return flat_[index_of(dtype)].params; }

bool FlatStore::holds(const Tensor& param) const {
  if (!param.defined() || !param.is_floating_point()) return false;
  const Tensor& flat = flat_[index_of(param.dtype())].params;
  return flat.defined() && param.storage() == flat.storage();
}

Tensor FlatStore::bind_state(const Tensor& param, size_t buffer, const Tensor& current, const char* op,
                             const std::string& name) const {
  auto it = slots_.find(param.impl());
  if (it == slots_.end() || it->second.dtype != param.dtype())
    fail<ValueError>("{}: parameter '{}' is not in the flat layout; sync() must run first", op, name);
  const Tensor& flat = flat_[index_of(param.dtype())].buffers.at(buffer);
  Tensor slice = flat.as_strided(param.shape(), contiguous_strides(param.shape()), it->second.state_offset);
  if (!current.defined()) {
    kernels::fill_(slice, 0);
    return slice;
  }
  if (current.storage() == slice.storage() && current.offset() == slice.offset() && current.shape() == slice.shape() &&
      current.strides() == slice.strides())
    return current;
  if (current.dtype() != param.dtype())
    fail<DTypeError>("{}: state '{}' of parameter '{}' is {} but the parameter is {}", op, buffer_names_[buffer], name,
                     dtype_name(current.dtype()), dtype_name(param.dtype()));
  if (current.shape() != param.shape())
    fail<ShapeError>("{}: state '{}' of parameter '{}' has shape {} but the parameter has shape {}", op,
                     buffer_names_[buffer], name, to_string(current.shape()), to_string(param.shape()));
  kernels::copy_(slice, current);
  return slice;
}

}  // namespace attnlab::optim::detail

/// @file
/// FlatStore: an optimizer's parameters and per-parameter state buffers laid out in one flat
/// storage per dtype, so that an update can run as one parallel pass over all elements instead
/// of one pass per tensor (used by Adam/AdamW, optim/adam.cpp; docs/optim.md, "Flat storage").
///
/// Parameters are moved, not copied: each one's TensorImpl is pointed at a slice of the flat
/// storage (Tensor::set_data), so every handle a module holds sees the flat memory. A parameter
/// is moved only when that cannot break anyone's aliasing: it is contiguous and nothing else
/// views its storage. Gradients stay where autograd puts them; the update walks a segment table
/// of per-parameter pointers instead (why: docs/optim.md).
/// @ingroup optim
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "optim/optimizer.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim::detail {

class FlatStore {
 public:
  /// `buffers`: the names of the parameter-shaped state buffers kept flat (e.g. exp_avg).
  explicit FlatStore(std::vector<std::string> buffers);

  /// Brings the layout up to date with `groups`: nothing happens while the parameter list and
  /// every parameter's storage, offset, shape, strides and dtype are as the last sync left them;
  /// otherwise the layout is rebuilt, moving the parameters that can be moved into new flat
  /// storage (one copy of each), and the state views handed out before become stale (bind_state
  /// copies them in again). ValueError naming `op` when a parameter appears twice.
  void sync(const std::vector<ParamGroup>& groups, const char* op);

  /// The flat 1-d tensor holding the moved parameters of `dtype`, in group order; undefined
  /// before the first sync or when no parameter of that dtype could be moved.
  Tensor parameters(DType dtype) const;
  /// Whether `param` lives in the flat storage (so its data is a slice of parameters(dtype)).
  bool holds(const Tensor& param) const;

  /// The slice of flat buffer `buffer` (an index into the constructor's names) that is the
  /// state of `param`, shaped like it. `current` is the state tensor the optimizer has now:
  /// undefined (new state: the slice is zeroed), already that slice (returned as is), or any
  /// other tensor (after load_state_dict or a rebuild: copied into the slice). ShapeError or
  /// DTypeError naming `op` and `name` when `current` does not match the parameter.
  Tensor bind_state(const Tensor& param, size_t buffer, const Tensor& current, const char* op,
                    const std::string& name) const;

 private:
  struct Slot {
    DType dtype;
    int64_t state_offset;  ///< into the state buffers of its dtype (every parameter has one)
  };
  struct Entry {  // what sync compares to decide whether to rebuild
    const TensorImpl* impl;
    const Storage* storage;
    int64_t offset;
    Dims shape;
    Dims strides;
    DType dtype;
    bool operator==(const Entry&) const = default;
  };
  struct PerDType {
    Tensor params;                ///< (moved numel,) or undefined
    std::vector<Tensor> buffers;  ///< (numel of all parameters of the dtype,) each
  };
  static size_t index_of(DType dtype);
  static Entry entry_of(const Tensor& param);
  void rebuild(const std::vector<ParamGroup>& groups, const char* op);

  std::vector<std::string> buffer_names_;
  std::vector<Entry> signature_;
  std::unordered_map<const TensorImpl*, Slot> slots_;
  std::array<PerDType, 2> flat_;  ///< float32, float64
};

}  // namespace attnlab::optim::detail
/// @}

/// @file
/// Tensor: a reference-counted handle to a strided view of a Storage buffer.
///
/// Copying a Tensor copies the handle (like torch.Tensor in Python): both refer to the same
/// data. Views (reshape, permute, narrow, expand, ...) share the Storage and differ only in
/// offset, shape and strides.
///
/// This header owns data and metadata only. The autograd members at the bottom (requires_grad,
/// grad, backward, ...) are declared here so that users write `loss.backward()`, and are
/// implemented in autograd/variable.cpp; the only thing tensor/ knows of autograd is the
/// opaque `AutogradMeta` pointer it carries.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/allocator.hpp"
#include "tensor/dtype.hpp"
#include "tensor/shape.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

class AutogradMeta;  ///< autograd/variable.hpp
struct Node;         ///< autograd/node.hpp

/// A block of memory from the caching allocator.
class Storage {
 public:
  explicit Storage(size_t bytes) : bytes_(bytes) { data_ = storage_alloc(bytes ? bytes : 1, &capacity_); }  ///< `bytes` of uninitialised memory
  ~Storage() { storage_free(data_, capacity_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }  ///< the first byte
  size_t bytes() const { return bytes_; }  ///< the size requested

 private:
  void* data_;
  size_t bytes_;
  size_t capacity_;
};

/// What a Tensor handle points to: storage, offset, shape, strides, dtype and autograd state.
struct TensorImpl {
  std::shared_ptr<Storage> storage;  ///< the memory, shared with every view
  int64_t offset = 0;  ///< in elements
  Dims shape;  ///< sizes of the dims
  Dims strides;  ///< in elements
  DType dtype = DType::Float32;  ///< the element type
  std::shared_ptr<AutogradMeta> autograd;  ///< null until autograd needs it
};

/// A reference-counted handle to a strided view of a Storage buffer (see the file's description).
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}  ///< a handle to `impl`

  /// A new contiguous tensor with uninitialised contents.
  static Tensor empty(const Dims& shape, DType dtype = kFloat32);
  /// Makes this handle (and every copy of it) refer to `other`'s data, shape and dtype, keeping
  /// its autograd identity: how a module converts or replaces a parameter in place.
  void set_data(const Tensor& other) const;
  /// A view of this tensor's storage with other metadata (no copy, no autograd).
  Tensor as_strided(const Dims& shape, const Dims& strides, int64_t offset) const;

  bool defined() const { return impl_ != nullptr; }  ///< false for a default-constructed (undefined) tensor
  const Dims& shape() const { return impl_->shape; }  ///< sizes of the dims: (B, N, D) for a batch of sequences
  const Dims& strides() const { return impl_->strides; }  ///< elements to skip per step along each dim
  int64_t offset() const { return impl_->offset; }  ///< the first element's position in the storage, in elements
  int dim() const { return impl_->shape.size(); }  ///< the number of dims (0 for a scalar)
  int64_t size(int64_t dim) const;  ///< the size of one dim (negative dims count from the end); IndexError when out of range
  int64_t stride(int64_t dim) const;  ///< the stride of one dim (negative dims count from the end); IndexError when out of range
  int64_t numel() const { return numel_of(impl_->shape); }  ///< the number of elements (product of the shape)
  DType dtype() const { return impl_->dtype; }  ///< the element type
  bool is_contiguous() const;  ///< whether the elements lie in row-major order without gaps
  bool is_floating_point() const { return is_floating(dtype()); }  ///< float32, float64 or bfloat16
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }  ///< the memory this tensor views
  TensorImpl* impl() const { return impl_.get(); }  ///< the shared metadata (identity of a tensor for maps keyed by tensor)
  bool same(const Tensor& o) const { return impl_ == o.impl_; }  ///< whether both handles refer to the same TensorImpl
  long use_count() const { return impl_.use_count(); }  ///< the number of handles sharing the TensorImpl

  /// Typed pointer to the first element (offset applied). Throws DTypeError on a mismatch.
  template <class T> T* data() const {
    check_dtype(dtype_of<T>::value, "data");
    return static_cast<T*>(impl_->storage->data()) + impl_->offset;
  }
  void* raw_data() const {  ///< Untyped pointer to the first element (offset applied).
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * itemsize(dtype());
  }

  /// Element at a multi-index, converted to double (tests and printing; not a hot path).
  double at(std::initializer_list<int64_t> index) const;
  /// The value of a one-element tensor.
  double item() const;  ///< ValueError when the tensor is undefined or has more than one element
  template <class T> T item() const { return static_cast<T>(item()); }  ///< the value of a one-element tensor, converted to T
  /// All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  /// String form, NumPy-like, with shape and dtype (see tensor/print.cpp).
  std::string str() const;

  // ---- autograd (implemented in autograd/variable.cpp) ----
  bool requires_grad() const;  ///< whether a gradient is computed for this tensor (a leaf marked, or a result of one)
  /// Marks a leaf tensor as needing a gradient. Returns *this for chaining.
  Tensor& requires_grad_(bool on = true);
  /// The accumulated gradient of a leaf (or of a non-leaf after retain_grad()); undefined if none.
  Tensor grad() const;
  void set_grad(const Tensor& g) const;  ///< replaces .grad(); ShapeError when g's shape or dtype differs from the tensor's
  bool is_leaf() const;  ///< true unless the tensor was computed by a recorded op
  /// Runs backward from this tensor. A tensor with more than one element needs `grad`.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  /// A tensor that shares data but has no history.
  Tensor detach() const;
  /// Keeps .grad() of a non-leaf tensor after backward.
  void retain_grad() const;
  /// Calls `hook(grad)` when this tensor's gradient is computed; a defined return value
  /// replaces the gradient. Returns a handle for remove_hook.
  int register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(int handle) const;  ///< removes a hook that register_hook returned
  std::shared_ptr<Node> grad_fn() const;  ///< the node that produced this tensor; null for leaves

 private:
  void check_dtype(DType want, const char* op) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::string to_string(const Tensor& t);  ///< t.str()

/// Builds a tensor from values in row-major order; `values.size()` must equal numel(shape).
template <class T> Tensor from_vector(const std::vector<T>& values, const Dims& shape);
/// A 1-d tensor of `values`.
template <class T> Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Dims{static_cast<int64_t>(values.size())});
}
Tensor scalar_tensor(double value, DType dtype = kFloat32);  ///< A 0-d tensor holding `value`.

}  // namespace attnlab

/// @cond fmt_formatters
/// fmt::format("{}", x) for Dims, DType and Tensor (Doxygen cannot scope specialisations of
/// another library's templates, so they are left out of the reference).
template <>
struct fmt::formatter<attnlab::Dims> : fmt::formatter<std::string> {
  auto format(const attnlab::Dims& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(attnlab::to_string(d), ctx);
  }
};
template <>
struct fmt::formatter<attnlab::DType> : fmt::formatter<std::string_view> {
  auto format(attnlab::DType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(attnlab::dtype_name(t), ctx);
  }
};
template <>
struct fmt::formatter<attnlab::Tensor> : fmt::formatter<std::string> {
  auto format(const attnlab::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
/// @endcond
/// @}

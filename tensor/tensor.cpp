#include "tensor/tensor.hpp"

#include <new>

#include "tensor/pool.hpp"

namespace attnlab {

namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(int64_t{1} << 30)); }

// The bytes a contiguous `shape` of `dtype` needs, checked against overflow and against the
// machine's physical memory, so an impossible request is an error naming what was asked
// rather than a std::bad_alloc or a wrapped-around size.
size_t checked_bytes(const Dims& shape, DType dtype) {
  const int64_t n = numel_of(shape);  // ShapeError on a negative size or an int64 overflow
  int64_t bytes;
  if (__builtin_mul_overflow(n, int64_t(itemsize(dtype)), &bytes))
    fail<MemoryError>("empty: a {} tensor of shape {} needs {} x {} bytes, more than 2^63-1 bytes",
                      dtype_name(dtype), to_string(shape), n, itemsize(dtype));
  if (bytes > physical_memory_bytes())
    fail<MemoryError>("empty: a {} tensor of shape {} needs {} bytes ({}), more than the machine's {} of "
                      "physical memory",
                      dtype_name(dtype), to_string(shape), bytes, gib(bytes), gib(physical_memory_bytes()));
  return static_cast<size_t>(bytes);
}

}  // namespace

Tensor Tensor::empty(const Dims& shape, DType dtype) {
  auto impl = make_pooled<TensorImpl>();
  const size_t bytes = checked_bytes(shape, dtype);
  try {
    impl->storage = make_pooled<Storage>(bytes);
  } catch (const std::bad_alloc&) {
    fail<MemoryError>("empty: the system cannot allocate {} bytes ({}) for a {} tensor of shape {}", bytes,
                      gib(int64_t(bytes)), dtype_name(dtype), to_string(shape));
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::as_strided(const Dims& shape, const Dims& strides, int64_t offset) const {
  auto impl = make_pooled<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

void Tensor::set_data(const Tensor& other) const {
  if (!impl_ || !other.defined()) fail<ValueError>("set_data: both tensors must be defined");
  impl_->storage = other.impl_->storage;
  impl_->offset = other.impl_->offset;
  impl_->shape = other.impl_->shape;
  impl_->strides = other.impl_->strides;
  impl_->dtype = other.impl_->dtype;
}

int64_t Tensor::size(int64_t d) const { return impl_->shape[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to misplace (as in PyTorch); Tensor::empty({2,0,5}) is contiguous
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void Tensor::check_dtype(DType want, const char* op) const {
  if (!impl_) fail<ValueError>("{}: the tensor is undefined", op);
  if (dtype() != want) fail<DTypeError>("{}: the tensor is {}, not {}", op, dtype_name(dtype()), dtype_name(want));
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  if (static_cast<int>(index.size()) != dim())
    fail<IndexError>("at: {} indices given for a tensor of shape {}", index.size(), to_string(shape()));
  int64_t off = offset();
  int i = 0;
  for (int64_t ix : index) {
    if (ix < -shape()[i] || ix >= shape()[i])
      fail<IndexError>("at: index {} is out of range for dim {} of size {}", ix, i, shape()[i]);
    off += (ix < 0 ? ix + shape()[i] : ix) * strides()[i];
    ++i;
  }
  return dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(static_cast<const T*>(storage()->data())[off]);
  });
}

double Tensor::item() const {
  if (!impl_) fail<ValueError>("item: the tensor is undefined");
  if (numel() != 1)
    fail<ValueError>("item: only a one-element tensor converts to a number, got shape {}", to_string(shape()));
  return dispatch_all(dtype(), [&](auto tag) {
    using T = decltype(tag);
    return static_cast<double>(static_cast<const T*>(storage()->data())[offset()]);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(numel());
  dispatch_all(dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* base = static_cast<const S*>(storage()->data());
    Dims idx = Dims::filled(dim(), 0);
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = offset();
      for (int d = 0; d < dim(); ++d) off += idx[d] * strides()[d];
      out.push_back(static_cast<T>(base[off]));
      for (int d = dim() - 1; d >= 0; --d) {
        if (++idx[d] < shape()[d]) break;
        idx[d] = 0;
      }
    }
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

template <class T>
Tensor from_vector(const std::vector<T>& values, const Dims& shape) {
  if (static_cast<int64_t>(values.size()) != numel_of(shape))
    fail<ShapeError>("from_vector: {} values do not fill shape {} ({} elements)", values.size(),
                     to_string(shape), numel_of(shape));
  Tensor t = Tensor::empty(shape, dtype_of<T>::value);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, const Dims&);
template Tensor from_vector<double>(const std::vector<double>&, const Dims&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Dims&);
template Tensor from_vector<bool>(const std::vector<bool>&, const Dims&);

Tensor scalar_tensor(double value, DType dtype) {
  Tensor t = Tensor::empty(Dims{}, dtype);
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    *static_cast<T*>(t.raw_data()) = static_cast<T>(value);
  });
  return t;
}

std::string to_string(const Tensor& t) { return t.str(); }

}  // namespace attnlab

/// @file
/// Dims: a fixed-capacity list of sizes or strides (at most 8 dimensions), so that shapes never
/// touch the heap. Plus the shape arithmetic every op shares: numel, contiguous strides,
/// broadcasting, and dim wrapping.
/// @ingroup tensor
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tensor/error.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

/// A shape or a list of strides: up to kMax int64 sizes, stored inline (no allocation).
class Dims {
 public:
  static constexpr int kMax = 8;  ///< the most dims a tensor may have
  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.end()); }  ///< Dims{2, 3, 4}; ShapeError beyond kMax entries
  explicit Dims(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  ///< from a vector; ShapeError beyond kMax entries
  static Dims filled(int n, int64_t value) {  ///< n entries equal to value
    Dims d;
    for (int i = 0; i < n; ++i) d.push_back(value);
    return d;
  }
  template <class It> void assign(It b, It e) {  ///< replaces the entries with [b, e)
    n_ = 0;
    for (; b != e; ++b) push_back(*b);
  }
  void push_back(int64_t v) {  ///< appends v; ShapeError beyond kMax entries
    if (n_ == kMax) fail<ShapeError>("attnlab tensors have at most {} dimensions", kMax);
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {  ///< inserts v before entry pos
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(int pos) {  ///< removes entry pos
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  int size() const { return n_; }  ///< the number of entries (a tensor's dim())
  bool empty() const { return n_ == 0; }  ///< no entries (a 0-d shape)
  int64_t& operator[](int i) { return d_[i]; }  ///< entry i (unchecked)
  int64_t operator[](int i) const { return d_[i]; }  ///< entry i (unchecked)
  int64_t back() const { return d_[n_ - 1]; }  ///< the last entry
  int64_t* begin() { return d_.data(); }  ///< iteration over the entries
  int64_t* end() { return d_.data() + n_; }  ///< iteration over the entries
  const int64_t* begin() const { return d_.data(); }  ///< iteration over the entries
  const int64_t* end() const { return d_.data() + n_; }  ///< iteration over the entries
  std::vector<int64_t> vec() const { return {begin(), end()}; }  ///< the entries as a vector
  friend bool operator==(const Dims& a, const Dims& b) {  ///< same entries
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }  ///< different entries

 private:
  std::array<int64_t, kMax> d_{};
  int n_ = 0;
};

/// "(2,3,4)"; a 0-d shape prints as "()".
std::string to_string(const Dims& d);

/// Throws ShapeError naming `shape`: it has a negative size, or more elements than int64 counts.
[[noreturn]] void fail_bad_shape(const Dims& shape);

/// Checked: every size must be >= 0 and the product of the nonzero sizes must fit in int64, so
/// that the element count and every contiguous stride are exact. A zero size gives 0 elements.
inline int64_t numel_of(const Dims& shape) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t s : shape) {
    if (s < 0 || __builtin_mul_overflow(n, s == 0 ? 1 : s, &n)) [[unlikely]]
      fail_bad_shape(shape);
    zero |= s == 0;
  }
  return zero ? 0 : n;
}

/// Row-major strides; checked like numel_of (a stride is a product of trailing sizes).
inline Dims contiguous_strides(const Dims& shape) {
  Dims st = Dims::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    if (shape[i + 1] < 0 || __builtin_mul_overflow(st[i + 1], std::max<int64_t>(shape[i + 1], 1), &st[i]))
      [[unlikely]] fail_bad_shape(shape);
  return st;
}

/// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int wrap_dim(int64_t dim, int ndim, const char* op);

/// NumPy broadcasting of two shapes; throws ShapeError naming `op` and both shapes.
Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op);

/// Strides that read a tensor of `shape`/`strides` as if expanded to `target` (stride 0 on
/// broadcast dims). `target` must be a broadcast of `shape`.
Dims broadcast_strides(const Dims& shape, const Dims& strides, const Dims& target);

}  // namespace attnlab
/// @}

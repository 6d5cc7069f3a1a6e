/// @file
/// Stride arithmetic for reshape and view: whether a new shape can read the same memory through
/// other strides (no copy), and the sizes a shape with one -1 stands for.
/// @ingroup tensor
#pragma once
#include <cstdint>

#include "tensor/shape.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

/// Strides that view a tensor of `old_shape`/`old_strides` as `shape` (same numel) without a
/// copy (PyTorch's computeStride): true and *out set when possible, false when the memory
/// layout needs a copy.
bool view_strides(const Dims& old_shape, const Dims& old_strides, const Dims& shape, Dims* out);

/// `shape` with its one -1 (if any) replaced so that the sizes multiply to `numel` (the size of
/// a tensor of shape `from`); ShapeError naming `op` for two -1s, a negative size, or a numel
/// that does not fit.
Dims infer_shape(const Dims& shape, int64_t numel, const Dims& from, const char* op);

}  // namespace attnlab
/// @}

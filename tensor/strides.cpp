// Stride arithmetic for reshape and view (strides.hpp).
#include "tensor/strides.hpp"

namespace attnlab {

bool view_strides(const Dims& old_shape, const Dims& old_strides, const Dims& shape, Dims* out) {
  *out = Dims::filled(shape.size(), 1);
  if (numel_of(old_shape) == 0 || old_shape.empty()) {
    *out = contiguous_strides(shape);
    return true;
  }
  int view_d = shape.size() - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Dims infer_shape(const Dims& shape, int64_t numel, const Dims& from, const char* op) {
  Dims out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail<ShapeError>("{}: only one size may be -1, got {}", op, to_string(shape));
      infer = i;
    } else if (out[i] < 0) {
      fail<ShapeError>("{}: invalid size {} in {}", op, out[i], to_string(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail<ShapeError>("{}: cannot reshape {} ({} elements) to {}", op, to_string(from), numel, to_string(shape));
    out[infer] = numel / known;
  }
  if (numel_of(out) != numel)
    fail<ShapeError>("{}: cannot reshape {} ({} elements) to {} ({} elements)", op, to_string(from), numel,
                     to_string(out), numel_of(out));
  return out;
}

}  // namespace attnlab

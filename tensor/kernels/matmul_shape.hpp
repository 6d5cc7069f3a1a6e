/// @file
/// The shapes of a batched matrix product a (..., n, k) @ b (..., k, m), checked once for the
/// OpenBLAS (matmul.cpp) and oneDNN (matmul_onednn.cpp: bfloat16, and float32 by the route of
/// tensor/matmul_route.hpp) kernels.
/// @ingroup tensor
#pragma once
#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

/// The shapes of a batched matrix product a (..., n, k) @ b (..., k, m).
struct MatmulShape {
  int64_t n = 0;  ///< rows of a
  int64_t k = 0;  ///< the contracted size
  int64_t m = 0;  ///< columns of b
  Dims abatch;    ///< a's batch dims
  Dims bbatch;    ///< b's batch dims
  Dims batch;           ///< broadcast batch dims
  Dims out;             ///< batch + (n, m)
};

/// Throws ShapeError or DTypeError naming `op` when the operands cannot be multiplied.
MatmulShape matmul_shape(const Tensor& a, const Tensor& b, const char* op);

}  // namespace attnlab::kernels
/// @}

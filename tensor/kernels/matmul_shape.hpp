/// @file
/// The shapes of a batched matrix product a (..., n, k) @ b (..., k, m), checked once for the
/// float (OpenBLAS, matmul.cpp) and bfloat16 (oneDNN, matmul_bf16.cpp) kernels.
/// @ingroup tensor
#pragma once
#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

struct MatmulShape {
  int64_t n = 0, k = 0, m = 0;
  Dims abatch, bbatch;  ///< each operand's batch dims
  Dims batch;           ///< broadcast batch dims
  Dims out;             ///< batch + (n, m)
};

/// Throws ShapeError or DTypeError naming `op` when the operands cannot be multiplied.
MatmulShape matmul_shape(const Tensor& a, const Tensor& b, const char* op);

}  // namespace attnlab::kernels
/// @}

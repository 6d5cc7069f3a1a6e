/// @file
/// oneDNN's matmul primitive behind attnlab's matrix products: bfloat16 operands (autocast,
/// kernels::matmul_bf16) and float32 operands where the float32 route sends them
/// (tensor/matmul_route.hpp). Both give a float32 result. Defined in matmul_onednn.cpp, the one
/// kernel file that includes oneDNN's header.
/// @ingroup tensor
#pragma once
#include "tensor/kernels/matmul_shape.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

/// out = a @ b on oneDNN: a (..., n, k) and b (..., k, m) both bfloat16 or both float32, shapes
/// checked by matmul_shape into `s`; `out` a dense float32 tensor of shape s.out with n, m, k > 0.
/// Operands are read with their strides (a batch no stride describes is copied); the output is
/// split into row (or column) blocks, one TBB task each, each calling oneDNN on one OpenMP
/// thread. Primitives are cached per block description. Throws ValueError when attnlab was built
/// without oneDNN.
void onednn_matmul(const Tensor& a, const Tensor& b, const MatmulShape& s, const Tensor& out);

/// Primitives held by onednn_matmul's cache (one per distinct block description, at most
/// kOnednnCacheCapacity), for tests and benchmarks.
int64_t onednn_cached_primitives();

/// The cache's bound: past it the cache is emptied and refilled (a training step uses a few dozen).
inline constexpr int64_t kOnednnCacheCapacity = 1024;

}  // namespace attnlab::kernels
/// @}

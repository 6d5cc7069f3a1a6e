/// @file
/// Creating tensors. Random ones draw from an explicit Generator, so a seed fixes every value.
/// @ingroup tensor
#pragma once
#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

Tensor empty(const Dims& shape, DType dtype = kFloat32);  ///< uninitialised contents
Tensor zeros(const Dims& shape, DType dtype = kFloat32);  ///< filled with 0
Tensor ones(const Dims& shape, DType dtype = kFloat32);  ///< filled with 1
Tensor full(const Dims& shape, double value, DType dtype = kFloat32);  ///< filled with value
Tensor zeros_like(const Tensor& x);  ///< zeros of x's shape and dtype
Tensor ones_like(const Tensor& x);  ///< ones of x's shape and dtype
Tensor full_like(const Tensor& x, double value);  ///< value in x's shape and dtype
/// [start, end) in steps of `step`.
Tensor arange(double end, DType dtype = kInt64);
Tensor arange(double start, double end, double step = 1, DType dtype = kInt64);  ///< [start, end) in steps of `step`
Tensor eye(int64_t n, DType dtype = kFloat32);  ///< the (n, n) identity matrix
Tensor eye(int64_t n, int64_t m, DType dtype = kFloat32);  ///< (n, m) with ones on the diagonal
/// Normal(mean, std), uniform [low, high), integers [low, high), Bernoulli(p).
Tensor randn(const Dims& shape, Generator& gen, DType dtype = kFloat32, double mean = 0, double std = 1);
Tensor rand(const Dims& shape, Generator& gen, DType dtype = kFloat32, double low = 0, double high = 1);  ///< uniform in [low, high)
Tensor randint(int64_t low, int64_t high, const Dims& shape, Generator& gen, DType dtype = kInt64);  ///< integers uniform in [low, high)
Tensor bernoulli(const Dims& shape, double p, Generator& gen, DType dtype = kFloat32);  ///< 1 with probability p, else 0
/// One draw per element of `probs` (values in [0, 1]), same shape and dtype.
Tensor bernoulli(const Tensor& probs, Generator& gen);

}  // namespace attnlab
/// @}

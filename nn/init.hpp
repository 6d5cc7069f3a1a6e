/// @file
/// Parameter initialisers, as in torch.nn.init. Each fills a floating tensor in place (any
/// strides), records no autograd history, draws from `gen` (the default generator unless one is
/// given) and returns the same handle.
///
/// Fans follow PyTorch's _calculate_fan_in_and_fan_out: for a weight of shape (out, in, *k),
/// fan_in = in * prod(k) and fan_out = out * prod(k); tensors with fewer than 2 dims have no fan.
/// Gains follow torch.nn.init.calculate_gain.
/// @ingroup nn
#pragma once
#include <string>
#include <utility>

#include "tensor/random.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn::init {

/// Which fan kaiming_ initialisers scale by.
enum class FanMode { FanIn, FanOut };

/// (fan_in, fan_out) of a weight of at least 2 dims; ValueError otherwise.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
/// The recommended gain for a nonlinearity: "linear", "conv1d/2d/3d", "conv_transpose1d/2d/3d",
/// "sigmoid" -> 1; "tanh" -> 5/3; "relu" -> sqrt(2); "leaky_relu" -> sqrt(2 / (1 + slope^2))
/// with slope = param (0.01 when param < 0, i.e. not given); "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, double param = -1);

Tensor normal_(const Tensor& t, double mean = 0, double std = 1, Generator& gen = default_generator());  ///< Fills t with N(mean, std^2) draws from `gen`, in place; returns t.
/// Normal(mean, std) restricted to [a, b] (absolute bounds, like torch.nn.init.trunc_normal_).
/// Drawn by inverse CDF, as PyTorch does: u ~ U(Phi(alpha), Phi(beta)) with alpha = (a-mean)/std,
/// beta = (b-mean)/std, then mean + std * Phi^-1(u). One uniform draw per element, so the
/// generator advances by exactly numel (no data-dependent resampling).
Tensor trunc_normal_(const Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                     Generator& gen = default_generator());
Tensor uniform_(const Tensor& t, double low = 0, double high = 1, Generator& gen = default_generator());  ///< Fills t with U(low, high) draws from `gen`, in place; returns t.
Tensor constant_(const Tensor& t, double value);  ///< Fills t with `value`, in place; returns t.
Tensor zeros_(const Tensor& t);  ///< Fills t with 0, in place; returns t.
Tensor ones_(const Tensor& t);  ///< Fills t with 1, in place; returns t.
/// Glorot & Bengio (2010): U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)), or
/// N(0, gain^2 * 2 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1, Generator& gen = default_generator());
Tensor xavier_normal_(const Tensor& t, double gain = 1, Generator& gen = default_generator());  ///< the normal form of xavier_uniform_
/// He et al. (2015): std = gain / sqrt(fan) with gain = calculate_gain(nonlinearity, a);
/// U(-sqrt(3) std, sqrt(3) std) or N(0, std^2). PyTorch's defaults: a = 0, fan_in, leaky_relu.
Tensor kaiming_uniform_(const Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                        const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator());
/// The normal form of kaiming_uniform_.
Tensor kaiming_normal_(const Tensor& t, double a = 0, FanMode mode = FanMode::FanIn,
                       const std::string& nonlinearity = "leaky_relu", Generator& gen = default_generator());

/// Inverse of the standard normal CDF, accurate to double precision on (0, 1).
double normal_icdf(double p);

}  // namespace attnlab::nn::init
/// @}

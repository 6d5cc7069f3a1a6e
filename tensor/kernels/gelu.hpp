/// @file
/// GELU (Hendrycks & Gimpel 2016) and its derivative as scalar functions, shared by the
/// elementwise gelu kernels (elementwise.cpp) and the fused bias + GELU pass (fused.cpp):
///   exact:  gelu(x) = x Phi(x),  gelu'(x) = Phi(x) + x phi(x)
///   tanh:   gelu(x) = x (1 + tanh(u)) / 2,  u = sqrt(2/pi) (x + 0.044715 x^3)
/// The exact form in float goes through normal_cdf_fast (rows.hpp), which vectorises and keeps
/// its relative precision in the negative tail where 1 + erf cancels, and gives the
/// exp(-x^2 / 2) of phi as a by-product; double goes through the library's erf.
/// @ingroup tensor
#pragma once
#include <cmath>

#include "tensor/kernels/rows.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

inline constexpr double kInvSqrt2 = 0.70710678118654752440;  ///< 1 / sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  ///< 1 / sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  ///< sqrt(2 / pi)
inline constexpr double kGeluC = 0.044715;  ///< the cubic coefficient of the tanh form

inline float gelu_erf(float x) { return x * normal_cdf_fast(x).cdf; }  ///< x Phi(x), Phi from normal_cdf_fast
inline double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2)); }  ///< x Phi(x) with std::erf
/// d/dx of x Phi(x): Phi(x) + x phi(x).
inline float gelu_erf_grad(float x) {
  const NormalCdf n = normal_cdf_fast(x);
  return n.cdf + x * static_cast<float>(kInvSqrt2Pi) * n.gauss;
}
/// d/dx of x Phi(x): Phi(x) + x phi(x).
inline double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

/// The tanh form: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x)));
}
/// d/dx of gelu_tanh.
template <class T>
T gelu_tanh_grad(T x) {
  const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kGeluC) * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluC) * x * x);
}

}  // namespace attnlab::kernels
/// @}

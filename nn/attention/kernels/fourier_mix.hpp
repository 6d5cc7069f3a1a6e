/// @file
/// FNet's token mixing (Lee-Thorp et al. 2021): y = Re(F_N x F_D) per batch element, i.e. the
/// real part of a 2-D DFT over (sequence, hidden), on FFTW.
///
/// The map is real-linear and self-adjoint: for real x and real upstream gradient g,
///   <g, Re(F_N x F_D)> = Re tr(g^T F_N x F_D)  =>  dL/dx = Re(F_N^T g F_D^T) = Re(F_N g F_D)
/// (F symmetric), which equals Re(F_N^H g F_D^H) since g is real. So backward is the same
/// transform applied to g.
///
/// FFTW: one r2c 2-D plan per (N, D, dtype), created once and cached (plan creation is not
/// thread-safe: a mutex guards the cache; plans are made with FFTW_ESTIMATE | FFTW_UNALIGNED so
/// that the thread-safe new-array execute functions accept any slice). The half spectrum
/// (N, D/2 + 1) gives the other half by Hermitian symmetry: Z[n, d] = conj(Z[(N-n) % N, D-d]).
/// @ingroup attention
#pragma once
#include "tensor/tensor.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn::fourier {

/// x (B, N, D) float32 or float64 -> Re(FFT_N(FFT_D(x))) (B, N, D); no autograd.
Tensor fourier_mix_kernel(const Tensor& x);

/// The differentiable op on (B, N, D).
Tensor fourier_mix(const Tensor& x);

}  // namespace attnlab::nn::fourier
/// @}

/// @file
/// tanh over a block of floats in a loop the compiler vectorises, for the soft-capped scores of the
/// tile kernel (docs/attention.md, "Soft-capping"): c tanh(s / c) is evaluated on every score of
/// every tile, forward and in both backward passes, where a call of std::tanh per element costs
/// more than the tile's matrix product.
///
///   tanh(x) = sign(x) * -m / (2 + m),   m = expm1(-2|x|)
///
/// expm1(y) for y in [-18, 0] (|x| >= 9 rounds to 1 in float) by range reduction: y = k ln 2 + r,
/// |r| <= ln 2 / 2, k an integer, so expm1(y) = 2^k expm1(r) + (2^k - 1), with expm1(r) its Taylor
/// series to r^8 (remainder below 1e-9 relative). For k = 0 this is expm1(r) itself, so small
/// |x| keeps full relative accuracy (no 1 - e^y cancellation). Every step is a float multiply,
/// add, divide, round or bit move: no branch, no call. The float64 path of the kernel, used by the
/// gradient checks and golden tests, keeps std::tanh; tests/efficient/test_tile_attention.cpp checks
/// this one against std::tanh (double) over the float range.
/// @ingroup attention
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

/// @addtogroup attention
/// @{
namespace attnlab::nn::fastmath {

/// expm1(y) for y in [-18, 0], float.
inline float expm1_neg(float y) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723e-6f;  // ln 2 = hi + lo
  const float k = std::nearbyint(y * kLog2e);                                       // in [-26, 0]
  const float r = (y - k * kLn2Hi) - k * kLn2Lo;                                    // |r| <= ln2/2
  float p = 1.0f / 40320;                                                           // expm1(r) / r
  p = p * r + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  const float em1 = p * r;                                                          // expm1(r)
  const float two_k = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);  // 2^k
  return two_k * em1 + (two_k - 1.0f);
}

/// out[i] = tanh(in[i]) for i < n (in and out may be the same array).
inline void tanh_block(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float m = expm1_neg(-2.0f * std::min(std::fabs(x), 9.0f));
    out[i] = std::copysign(-m / (2.0f + m), x);
  }
}

/// The float64 twin: std::tanh.
inline void tanh_block(const double* in, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

}  // namespace attnlab::nn::fastmath
/// @}

/// @file
/// Helpers for kernels that work row by row along one dim: move that dim to the end (a view),
/// find where row r starts for any strided operand, sum or max a row; and the branch-free float
/// math (exp, the normal CDF) that the kernels' loops need in order to vectorise.
/// @ingroup tensor
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/tensor.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::kernels {

/// View of x with dim `d` moved to the last position.
inline Tensor move_dim_last(const Tensor& x, int d) {
  Dims sh, st;
  for (int i = 0; i < x.dim(); ++i)
    if (i != d) {
      sh.push_back(x.shape()[i]);
      st.push_back(x.strides()[i]);
    }
  sh.push_back(x.shape()[d]);
  st.push_back(x.strides()[d]);
  return x.as_strided(sh, st, x.offset());
}

/// Inverse of move_dim_last: view of y (last dim = original dim d) in the original order.
inline Tensor move_last_to(const Tensor& y, int d) {
  Dims sh, st;
  int n = y.dim();
  for (int i = 0, j = 0; i < n; ++i) {
    if (i == d) {
      sh.push_back(y.shape()[n - 1]);
      st.push_back(y.strides()[n - 1]);
    } else {
      sh.push_back(y.shape()[j]);
      st.push_back(y.strides()[j]);
      ++j;
    }
  }
  return y.as_strided(sh, st, y.offset());
}

/// Element offset (relative to the tensor's own offset) of row r, where rows enumerate the
/// first `nlead` dims of `shape` in row-major order.
inline int64_t row_offset(int64_t r, const Dims& shape, const Dims& strides, int nlead) {
  int64_t off = 0;
  for (int d = nlead - 1; d >= 0; --d) {
    off += (r % shape[d]) * strides[d];
    r /= shape[d];
  }
  return off;
}

/// Sum of p[0..R). Thirty-two independent lanes (four AVX registers) let the compiler vectorise
/// and keep four additions in flight; the order of additions depends only on R, never on the
/// thread count. The lanes start from the first 32 values (0 + p[l], the same sums as starting
/// from zero): zero-filling a lane array costs a rep stos per call, which shows when a reduction
/// calls this once per 2048-float row.
template <class T>
T sum_row(const T* p, int64_t R) {
  constexpr int kLanes = 32;
  if (R < kLanes) {
    T s = 0;
    for (int64_t r = 0; r < R; ++r) s += p[r];
    return s;
  }
  T lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = T(0) + p[l];
  int64_t r = kLanes;
  for (; r + kLanes <= R; r += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += p[r + l];
  // Pairwise, written out so that the compiler unrolls it into vector additions.
  static_assert(kLanes == 32);
  for (int l = 0; l < 16; ++l) lane[l] += lane[l + 16];
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  T s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
  for (; r < R; ++r) s += p[r];
  return s;
}

/// Floats as int32 keys whose integer order is the float order (-0 just below +0, NaNs beyond
/// the infinities), and back. Integer min/max vectorise where float ones do not: GCC (with the
/// default -ftrapping-math and signed zeros) keeps a float select as a branch when arithmetic
/// follows it, and then gives up vectorising the loop.
inline int32_t float_key(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b ^ ((b >> 31) & 0x7FFFFFFF);  // sign-magnitude -> two's-complement order
}
/// The float of a float_key.
inline float float_from_key(int32_t k) {
  k ^= (k >> 31) & 0x7FFFFFFF;  // the same map is its own inverse
  float f;
  std::memcpy(&f, &k, sizeof f);
  return f;
}

/// Maximum of p[0..L), NaN ignored (like the loop m = p[j] > m ? p[j] : m), -inf if nothing is
/// left. Sixteen lanes of integer keys, so that it vectorises.
inline float max_row(const float* p, int64_t L) {
  constexpr int kLanes = 16;
  constexpr int32_t kNone = std::numeric_limits<int32_t>::min();  // below every non-NaN key
  auto key = [](float v) {
    const int32_t nan = -static_cast<int32_t>(v != v);  // all ones for NaN
    return (float_key(v) & ~nan) | (kNone & nan);
  };
  int32_t m = kNone;
  int64_t j = 0;
  if (L >= kLanes) {
    int32_t lane[kLanes];
    for (int l = 0; l < kLanes; ++l) lane[l] = kNone;
    for (; j + kLanes <= L; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], key(p[j + l]));
    for (int l = 0; l < kLanes; ++l) m = std::max(m, lane[l]);
  }
  for (; j < L; ++j) m = std::max(m, key(p[j]));
  return m == kNone ? -std::numeric_limits<float>::infinity() : float_from_key(m);
}
/// The largest of p[0 .. L) (double rows: plain loop).
inline double max_row(const double* p, int64_t L) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < L; ++j) m = p[j] > m ? p[j] : m;
  return m;
}

/// c ? a : b by integer masks. Written as a select, GCC sinks the work that only one arm needs
/// into a branch and, again, does not vectorise.
inline float select_branchless(bool c, float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof ia);
  std::memcpy(&ib, &b, sizeof ib);
  const int32_t m = -static_cast<int32_t>(c);
  const int32_t r = (ia & m) | (ib & ~m);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

/// exp(x) by the Cephes expf polynomial, about 1 ulp, for x in [-87.3365, 88.7228] (where the
/// result is a normal float); garbage, but no undefined behaviour, outside that range: exp_fast
/// overrides it there. Every step is plain float or integer arithmetic, so that loops over it
/// vectorise (GCC vectorises neither std::floor nor a float-to-int conversion of a possibly
/// out-of-range value, and adds a branch for each float select).
inline float exp_core(float x) {
  // n = round(x / ln 2), by adding 1.5 * 2^23: the sum's low mantissa bits then hold n + 2^22
  // (valid for |n| < 2^22; ties go to even, where Cephes rounds up: the same result to 1 ulp).
  constexpr float kRound = 12582912.0f;
  const float s = x * 1.44269504088896341f + kRound;
  const float fx = s - kRound;
  const float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;  // x - n ln 2, in two parts
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;  // exp(r), r in [-0.35, 0.35]
  // y * 2^n by adding n to y's exponent field: shifting s's bits left by 23 leaves n << 23 (the
  // 2^22 and the exponent bits of s fall off the top). Exact, and within the range above the
  // exponent stays in 1..254: n = 128 only with y < 1, n = -126 only with y >= 1.
  // Unsigned, so that the garbage outside the range wraps instead of overflowing (UB).
  uint32_t yb, sb;
  std::memcpy(&yb, &y, sizeof yb);
  std::memcpy(&sb, &s, sizeof sb);
  const uint32_t out_bits = yb + (sb << 23);
  float out;
  std::memcpy(&out, &out_bits, sizeof out);
  return out;
}

/// exp for float, branch-free so loops over it vectorise; exact 0 below the float range, +inf
/// above it, NaN kept. The first select covers both overflow and NaN (!(x <= hi) holds for
/// both), with x * inf being +inf or NaN.
inline float exp_fast(float x) {
  float y = exp_core(x);
  y = select_branchless(!(x <= 88.7228f), x * INFINITY, y);
  return select_branchless(x < -87.3365f, 0.0f, y);
}
inline double exp_fast(double x) { return std::exp(x); }  ///< std::exp: double rows keep full precision

/// The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2 for float, branch-free so loops over
/// it vectorise (std::erf neither vectorises nor predicts well: it branches on the range), with
/// exp(-x^2 / 2) as a by-product (GELU's derivative needs it too).
///
/// For t = |x| / sqrt 2, erfc(t) / 2 = exp(-t^2) * erfcx(t) / 2, where erfcx, the scaled
/// complementary error function, is a degree-8 polynomial in u = 1 / (1 + 0.3225 t) fitted for
/// relative error on t in [0, 9.35] (3e-8 in exact arithmetic, 8e-8 with float coefficients);
/// Phi(x) is that for x < 0 and 1 minus it for x > 0. Taking the small side from erfc keeps
/// Phi's relative precision in the negative tail, where 1 + erf cancels. exp(-x^2 / 2) is
/// 2^n * 2^f with n = round(-x^2 log2(e) / 2) and f = -x^2 log2(e) / 2 - n in [-1/2, 1/2], one
/// fma (|x^2 log2(e) / 2| <= 126 here, so rounding the constant costs at most 1e-6 relative),
/// and 2^f by a degree-6 polynomial fitted for relative error on [-1/2, 1/2] (2e-9; 1e-7 in
/// float arithmetic). Relative error of Phi, so of GELU, against float64 (every 8th float
/// checked): below 1e-6 for x > -5, 6e-6 down to x = -13.2, where Phi leaves the normal floats
/// and becomes 0. NaN gives NaN.
struct NormalCdf {
  float cdf;    ///< Phi(x)
  float gauss;  ///< exp(-x^2 / 2)
};
/// Phi(x) and exp(-x^2 / 2) of a float (see NormalCdf).
inline NormalCdf normal_cdf_fast(float x) {
  const float u = 1.0f / (1.0f + 0.22804193693f * std::abs(x));  // 0.3225 / sqrt 2
  float p = -8.483459800e-02f;  // the fitted coefficients, halved
  p = p * u + 3.279770017e-01f;
  p = p * u - 3.447337449e-01f;
  p = p * u + 3.668570518e-01f;
  p = p * u - 7.226029783e-02f;
  p = p * u + 1.333445758e-01f;
  p = p * u + 8.168387413e-02f;
  p = p * u + 9.201668948e-02f;
  p = p * u - 5.055438669e-05f;  // erfcx(t) / 2
  // exp(-x^2 / 2), as in exp_core: n from the low bits of s, then 2^f * 2^n.
  constexpr float kRound = 12582912.0f, kHalfLog2e = -0.72134752044f;
  const float xx = x * x;
  const float s = xx * kHalfLog2e + kRound;
  const float fx = s - kRound;
  const float f = xx * kHalfLog2e - fx;
  float y = 1.534603653e-04f;  // 2^f
  y = y * f + 1.340002636e-03f;
  y = y * f + 9.618489072e-03f;
  y = y * f + 5.550328642e-02f;
  y = y * f + 2.402264625e-01f;
  y = y * f + 6.931471825e-01f;
  y = y * f + 1.0f;
  uint32_t yb, sb;
  std::memcpy(&yb, &y, sizeof yb);
  std::memcpy(&sb, &s, sizeof sb);
  const uint32_t gb = yb + (sb << 23);
  float gauss;
  std::memcpy(&gauss, &gb, sizeof gauss);
  // Beyond x^2 = 174.672 the result would be subnormal (n < -126 or f < 0 at n = -126): 0.
  gauss = select_branchless(xx > 174.672f, 0.0f, gauss);
  const float tail = gauss * p;  // erfc(t) / 2
  return {select_branchless(x > 0.0f, 1.0f - tail, tail), gauss};
}

}  // namespace attnlab::kernels
/// @}

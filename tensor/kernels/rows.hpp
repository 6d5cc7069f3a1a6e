// Helpers for kernels that work row by row along one dim: move that dim to the end (a view),
// and find where row r starts for any strided operand.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/tensor.hpp"

namespace attnlab::kernels {

// View of x with dim `d` moved to the last position.
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

// Inverse of move_dim_last: view of y (last dim = original dim d) in the original order.
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

// Element offset (relative to the tensor's own offset) of row r, where rows enumerate the
// first `nlead` dims of `shape` in row-major order.
inline int64_t row_offset(int64_t r, const Dims& shape, const Dims& strides, int nlead) {
  int64_t off = 0;
  for (int d = nlead - 1; d >= 0; --d) {
    off += (r % shape[d]) * strides[d];
    r /= shape[d];
  }
  return off;
}

// Sum of p[0..R). Thirty-two independent lanes (four AVX registers) let the compiler vectorise
// and keep four additions in flight; the order of additions depends only on R, never on the
// thread count.
template <class T>
T sum_row(const T* p, int64_t R) {
  constexpr int kLanes = 32;
  T s = 0;
  int64_t r = 0;
  if (R >= kLanes) {
    T lane[kLanes] = {};
    for (; r + kLanes <= R; r += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += p[r + l];
    // Pairwise, written out so that the compiler unrolls it into vector additions.
    static_assert(kLanes == 32);
    for (int l = 0; l < 16; ++l) lane[l] += lane[l + 16];
    for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
    for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
    s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
  }
  for (; r < R; ++r) s += p[r];
  return s;
}

// Floats as int32 keys whose integer order is the float order (-0 just below +0, NaNs beyond
// the infinities), and back. Integer min/max vectorise where float ones do not: GCC (with the
// default -ftrapping-math and signed zeros) keeps a float select as a branch when arithmetic
// follows it, and then gives up vectorising the loop.
inline int32_t float_key(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b ^ ((b >> 31) & 0x7FFFFFFF);  // sign-magnitude -> two's-complement order
}
inline float float_from_key(int32_t k) {
  k ^= (k >> 31) & 0x7FFFFFFF;  // the same map is its own inverse
  float f;
  std::memcpy(&f, &k, sizeof f);
  return f;
}

// Maximum of p[0..L), NaN ignored (like the loop m = p[j] > m ? p[j] : m), -inf if nothing is
// left. Sixteen lanes of integer keys, so that it vectorises.
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
inline double max_row(const double* p, int64_t L) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < L; ++j) m = p[j] > m ? p[j] : m;
  return m;
}

// c ? a : b by integer masks. Written as a select, GCC sinks the work that only one arm needs
// into a branch and, again, does not vectorise.
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

// exp(x) by the Cephes expf polynomial, about 1 ulp, for x in [-87.3365, 88.7228] (where the
// result is a normal float); garbage, but no undefined behaviour, outside that range: exp_fast
// overrides it there. Every step is plain float or integer arithmetic, so that loops over it
// vectorise (GCC vectorises neither std::floor nor a float-to-int conversion of a possibly
// out-of-range value, and adds a branch for each float select).
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
  int32_t yb, sb;
  std::memcpy(&yb, &y, sizeof yb);
  std::memcpy(&sb, &s, sizeof sb);
  const int32_t out_bits = yb + static_cast<int32_t>(static_cast<uint32_t>(sb) << 23);
  float out;
  std::memcpy(&out, &out_bits, sizeof out);
  return out;
}

// exp for float, branch-free so loops over it vectorise; exact 0 below the float range, +inf
// above it, NaN kept. The first select covers both overflow and NaN (!(x <= hi) holds for
// both), with x * inf being +inf or NaN.
inline float exp_fast(float x) {
  float y = exp_core(x);
  y = select_branchless(!(x <= 88.7228f), x * INFINITY, y);
  return select_branchless(x < -87.3365f, 0.0f, y);
}
inline double exp_fast(double x) { return std::exp(x); }

// erfc for float, branch-free so loops over it vectorise (std::erf neither vectorises nor
// predicts well: it branches on the range). erfc(t) = exp(-t^2) * erfcx(t) for t = |x|, where
// erfcx, the scaled complementary error function, is a degree-9 polynomial in u = 1/(1 + 0.47 t)
// fitted for relative error on [0, 9.5] (1e-8 in exact arithmetic; in float a few 1e-7 for
// |x| < 4, 1.5e-5 near 9 where erfc is 1e-36; 0 from 9.35 on, where exp(-t^2) leaves the
// normal floats); erfc(x) = 2 - erfc(-x) for x < 0. NaN gives NaN. GELU uses erfc(-z) for
// 1 + erf(z): it keeps its relative precision in the negative tail, where 1 + erf(z) cancels.
inline float erfc_fast(float x) {
  const float t = std::abs(x);
  const float u = 1.0f / (1.0f + 0.47f * t);
  float p = -5.467933416e-02f;
  p = p * u + 3.071420789e-01f;
  p = p * u - 6.519021988e-01f;
  p = p * u + 5.766879916e-01f;
  p = p * u - 2.099317461e-01f;
  p = p * u + 2.894308865e-01f;
  p = p * u + 2.092540264e-01f;
  p = p * u + 2.691579759e-01f;
  p = p * u + 2.648275793e-01f;
  p = p * u + 1.271377823e-05f;
  const float tt = t * t;
  const float e = select_branchless(tt > 87.3365f, 0.0f, exp_core(-tt)) * p;  // as exp_fast(-tt)
  return select_branchless(x < 0.0f, 2.0f - e, e);
}
inline double erfc_fast(double x) { return std::erfc(x); }

}  // namespace attnlab::kernels

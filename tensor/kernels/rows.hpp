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

// x with |x| clamped to hi > 0, by an integer min on the magnitude bits (for non-negative floats
// integer order is float order): a float select would do, but GCC then folds the constant into
// the arithmetic that follows, splits it into branches and does not vectorise (see float_key).
// NaN comes out as +-hi: callers test for NaN themselves.
inline float clamp_abs(float x, float hi) {
  int32_t b, h;
  std::memcpy(&b, &x, sizeof b);
  std::memcpy(&h, &hi, sizeof h);
  const int32_t r = (b & std::numeric_limits<int32_t>::min()) | std::min(b & 0x7FFFFFFF, h);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
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

// exp(x) for |x| <= 90.25 by the Cephes expf polynomial, about 1 ulp where the result is a
// normal float; no special cases (exp_fast adds them).
inline float exp_core(float x) {
  // floor by truncation and an integer correction: GCC vectorises neither std::floor nor a
  // float select here (it counts both as possibly trapping). Exact, since |t| < 131.
  const float t = x * 1.44269504088896341f + 0.5f;
  int32_t it = static_cast<int32_t>(t);
  it -= static_cast<float>(it) > t;
  const float fx = static_cast<float>(it);
  float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  // 2^fx as two factors: fx reaches 128 for x in (88.38, 88.72], where one factor 2^128 would
  // overflow to inf although exp(x) itself is finite (and -130 at x = -90.25).
  const int32_t e1 = it >> 1;
  int32_t bits1 = (e1 + 127) << 23, bits2 = (it - e1 + 127) << 23;
  float scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof scale1);
  std::memcpy(&scale2, &bits2, sizeof scale2);
  return y * scale1 * scale2;
}

// exp for float, branch-free so loops over it vectorise; exact 0 below the float range, +inf
// above it, NaN kept.
inline float exp_fast(float x) {
  float y = exp_core(clamp_abs(x, 88.7228f));  // |x| beyond the range is overridden below
  y = select_branchless(x < -87.3365f, 0.0f, y);
  y = select_branchless(x > 88.7228f, INFINITY, y);
  return select_branchless(x != x, x, y);
}
inline double exp_fast(double x) { return std::exp(x); }

// erfc for float, branch-free so loops over it vectorise (std::erf neither vectorises nor
// predicts well: it branches on the range). erfc(t) = exp(-t^2) * erfcx(t) for t = |x|, where
// erfcx, the scaled complementary error function, is a degree-9 polynomial in u = 1/(1 + 0.47 t)
// fitted for relative error on [0, 9.5] (1e-8 in exact arithmetic; in float a few 1e-7 for
// |x| < 4, 1.5e-5 near 9 where erfc is 1e-36; 0 beyond 9.5); erfc(x) = 2 - erfc(-x) for x < 0.
// GELU uses erfc(-z) for 1 + erf(z): it keeps its relative precision in the negative tail,
// where 1 + erf(z) cancels. erfc_finite skips the NaN test (NaN in, a finite value out) for
// callers that multiply by x anyway; erfc_fast has it.
inline float erfc_finite(float x) {
  const float t = std::abs(clamp_abs(x, 9.5f));
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
inline float erfc_fast(float x) { return select_branchless(x != x, x, erfc_finite(x)); }
inline double erfc_fast(double x) { return std::erfc(x); }

}  // namespace attnlab::kernels

/// @file
/// The score policies of the tiled attention kernel (tile_attention.cpp): how one score kind turns
/// a block of scores into the weights that multiply V, carries its running row statistics across
/// key tiles, finishes a row, and differentiates. One type per TileScore, each a few functions; the
/// kernel's loops are templates over the policy, so no loop asks which kind it runs.
///
///   SoftmaxScore   online softmax (Dao et al. 2022): running max m and normaliser l, optional sinks
///                  (m = sink, l = 1 at the start of each row); lse = m + log l is saved
///   SigmoidScore   P = sigmoid(S + bias) on allowed entries, no normaliser and no row state
///   SoftpickScore  running c = max(0, row max) from 0: e = e^(S - c) - e^(-c), l += |e|,
///                  weights relu(e); O = acc / (l + eps); L = c + log(l + eps) saved in the lse slot,
///                  c in its own row
///
/// Every policy has the same members, which the kernel calls:
///   start_max(h), start_sum()        a row's (m, l) before its first key tile
///   block(S, r, c, m, l, acc, dv)    S (r, c) scores -> weights in place, m, l (r) updated and
///                                    acc (r, dv) rescaled when m grows
///   finish(acc, m, l, dv, out, lse, b, h, i)  row i's output (dv) and saved statistic(s)
///   row_c(b, h, i)                   the extra saved row value backward needs (softpick's c; else 0)
///   probabilities(row, c, lse)       backward: a row's weights recomputed from its scores and lse
///   grad(p, s, dp, D, lse, cmax)     dL/dS of one entry from its weight p, score s, dL/dP, the row's
///                                    D = rowsum(dO * O) - dlse, lse and c
///   needs_scores                     whether grad reads s (backward keeps a copy of the scores)
/// @ingroup attention
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensor/kernels/rows.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn::tile {

/// -infinity in T: the score of a disallowed entry.
template <class T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

/// A (B, h, rows, cols) tensor whose rows are read in place: row (b, h, i) starts at
/// p + b sb + h sh + i sr, elements contiguous.
template <class T>
struct Rows {
  T* p = nullptr;                    ///< element (0, 0, 0, 0)
  int64_t sb = 0, sh = 0, sr = 0;    ///< batch, head and row strides, in elements
  /// The first element of row (b, h, i).
  T* row(int64_t b, int64_t h, int64_t i) const { return p + b * sb + h * sh + i * sr; }
};

/// acc (dv) *= alpha, skipped when alpha is 1.
template <class T>
inline void rescale(T* acc, int64_t dv, T alpha) {
  if (alpha != T(1))
    for (int64_t d = 0; d < dv; ++d) acc[d] *= alpha;
}

/// The online softmax: running row max m and normaliser l, optional sinks.
template <class T>
struct SoftmaxScore {
  std::vector<T> sinks;  ///< (H) sink logits, or empty
  static constexpr bool needs_scores = false;  ///< grad does not read the score

  /// The row max m before a row's first key tile.
  T start_max(int64_t h) const { return sinks.empty() ? kNegInf<T> : sinks[h]; }
  /// The row sum l before a row's first key tile.
  T start_sum() const { return sinks.empty() ? T(0) : T(1); }

  /// Scores S (r, c) to weights in place; updates m, l (r) and rescales acc (r, dv).
  void block(T* S, int64_t r, int64_t c, T* m, T* l, T* acc, int64_t dv) const {
    for (int64_t ii = 0; ii < r; ++ii) {
      T* row = S + ii * c;
      const T m_new = std::max(m[ii], kernels::max_row(row, c));
      if (m_new == kNegInf<T>) {  // nothing allowed yet: keep the row empty, no 0 * inf
        std::fill(row, row + c, T(0));
        continue;
      }
      const T alpha = std::exp(m[ii] - m_new);  // 0 on the first allowed block
      for (int64_t j = 0; j < c; ++j) row[j] = kernels::exp_fast(row[j] - m_new);
      l[ii] = l[ii] * alpha + kernels::sum_row(row, c);
      rescale(acc + ii * dv, dv, alpha);
      m[ii] = m_new;
    }
  }

  /// Row i's output (dv) and its saved statistic.
  void finish(const T* acc, T m, T l, int64_t dv, T* out, T* lse, int64_t, int64_t, int64_t) const {
    if (l > T(0)) {
      const T inv = T(1) / l;
      for (int64_t d = 0; d < dv; ++d) out[d] = acc[d] * inv;
      *lse = m + std::log(l);
    } else {  // no allowed key and no sink
      std::fill(out, out + dv, T(0));
      *lse = kNegInf<T>;
    }
  }

  /// The extra saved row value backward needs: softpick's c, 0 for the other scores.
  T row_c(int64_t, int64_t, int64_t) const { return T(0); }

  /// Backward: a row's weights recomputed from its scores and lse.
  void probabilities(T* row, int64_t c, T lse) const {
    if (lse == kNegInf<T>) {
      std::fill(row, row + c, T(0));
      return;
    }
    for (int64_t j = 0; j < c; ++j) row[j] = kernels::exp_fast(row[j] - lse);
  }

  /// dL/dS of one entry from its weight p, score s, dL/dP, the row's D, lse and c.
  T grad(T p, T, T dp, T D, T, T) const { return p * (dp - D); }
};

/// Sigmoid scores: P = sigmoid(S + bias), no normaliser and no row state.
template <class T>
struct SigmoidScore {
  T bias = 0;  ///< P = sigmoid(S + bias)
  static constexpr bool needs_scores = false;  ///< grad does not read the score

  /// The row max m before a row's first key tile.
  T start_max(int64_t) const { return T(0); }
  /// The row sum l before a row's first key tile.
  T start_sum() const { return T(0); }

  /// Scores S (r, c) to weights in place; updates m, l (r) and rescales acc (r, dv).
  void block(T* S, int64_t r, int64_t c, T*, T*, T*, int64_t) const { probabilities(S, r * c, T(0)); }

  /// Row i's output (dv) and its saved statistic.
  void finish(const T* acc, T, T, int64_t dv, T* out, T* lse, int64_t, int64_t, int64_t) const {
    std::copy(acc, acc + dv, out);
    *lse = T(0);  // no lse: the saved slot is unused
  }

  /// The extra saved row value backward needs: softpick's c, 0 for the other scores.
  T row_c(int64_t, int64_t, int64_t) const { return T(0); }

  /// n entries (any number of rows: the weights do not depend on the row).
  void probabilities(T* S, int64_t n, T) const {
    for (int64_t a = 0; a < n; ++a) S[a] = S[a] == kNegInf<T> ? T(0) : T(1) / (T(1) + std::exp(-(S[a] + bias)));
  }

  /// dL/dS of one entry from its weight p, score s, dL/dP, the row's D, lse and c.
  T grad(T p, T, T dp, T, T, T) const { return dp * p * (T(1) - p); }
};

/// Softpick: relu(e^(S - c) - e^(-c)) over sum |e^(S - c) - e^(-c)| + eps, with a running c.
template <class T>
struct SoftpickScore {
  T eps = 0;  ///< the normaliser's eps (> 0)
  Rows<T> C;  ///< each row's c = max(0, max over allowed S), rows of one element
  static constexpr bool needs_scores = true;  ///< grad reads the score (its sign and S > 0)

  /// The row max m before a row's first key tile.
  T start_max(int64_t) const { return T(0); }
  /// The row sum l before a row's first key tile.
  T start_sum() const { return T(0); }

  /// Scores S (r, c) to weights in place; updates m, l (r) and rescales acc (r, dv).
  void block(T* S, int64_t r, int64_t c, T* m, T* l, T* acc, int64_t dv) const {
    for (int64_t ii = 0; ii < r; ++ii) {
      T* row = S + ii * c;
      const T c_new = std::max(m[ii], kernels::max_row(row, c)), floor = std::exp(-c_new);
      const T alpha = std::exp(m[ii] - c_new);
      T sum = 0;
      for (int64_t j = 0; j < c; ++j) {
        const T e = row[j] == kNegInf<T> ? T(0) : std::exp(row[j] - c_new) - floor;
        sum += std::abs(e);
        row[j] = std::max(e, T(0));
      }
      l[ii] = l[ii] * alpha + sum;
      rescale(acc + ii * dv, dv, alpha);
      m[ii] = c_new;
    }
  }

  /// O = acc / (l + eps); the lse slot keeps L = c + log(l + eps).
  void finish(const T* acc, T m, T l, int64_t dv, T* out, T* lse, int64_t b, int64_t h, int64_t i) const {
    const T z = l + eps;
    *C.row(b, h, i) = m;
    if (z > T(0)) {
      for (int64_t d = 0; d < dv; ++d) out[d] = acc[d] / z;
      *lse = m + std::log(z);
    } else {
      std::fill(out, out + dv, T(0));
      *lse = kNegInf<T>;
    }
  }

  /// The extra saved row value backward needs: softpick's c, 0 for the other scores.
  T row_c(int64_t b, int64_t h, int64_t i) const { return *C.row(b, h, i); }

  /// relu(exp(S - L) - exp(-L)), 0 for disallowed entries and empty rows.
  void probabilities(T* row, int64_t c, T lse) const {
    if (lse == kNegInf<T>) {
      std::fill(row, row + c, T(0));
      return;
    }
    const T floor = std::exp(-lse);
    for (int64_t j = 0; j < c; ++j) row[j] = row[j] == kNegInf<T> ? T(0) : std::max(std::exp(row[j] - lse) - floor, T(0));
  }

  /// With e = exp(s - c) - exp(-c) and P = relu(e) / Z (Z = sum |e| + eps, L = c + log Z):
  /// dL/de = (dp [e > 0] - D sign(e)) / Z,  de/ds = exp(s - c), so
  /// dL/ds = exp(s - L) (dp [s > 0] - D sign(s)); and through c (de/dc = -e, summed over the row):
  /// dL/dc = -D eps / Z, which reaches the entry that is the row max when c > 0.
  T grad(T, T s, T dp, T D, T lse, T cmax) const {
    if (s == kNegInf<T> || lse == kNegInf<T>) return T(0);
    T g = std::exp(s - lse) * ((s > T(0) ? dp : T(0)) - D * T((s > T(0)) - (s < T(0))));
    if (cmax > T(0) && s == cmax) g -= D * eps * std::exp(cmax - lse);
    return g;
  }
};

}  // namespace attnlab::nn::tile
/// @}

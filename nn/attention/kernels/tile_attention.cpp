// The tiled attention op (forward, both backward passes) and its naive twin. See
// tile_attention.hpp for the algorithm; this file adds the tile plan and the loops.
//
// Threads (tensor/parallel.hpp): forward split (b, h, group of query tiles); backward as
// backward_pass says; every task writes only its own rows and the result does not depend on the
// thread count. The tile products (Ctx): float32 on AVX-512 on tile_gemm_f32.hpp's products,
// bf16 under autocast on tile_gemm_bf16.hpp's, else BLAS, single-threaded inside the tasks.
#include "nn/attention/kernels/tile_attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "autograd/ops.hpp"
#include "autograd/trace.hpp"
#include "autograd/autocast.hpp"
#include "nn/attention/kernels/fast_tanh.hpp"
#include "nn/attention/kernels/tile_gemm_bf16.hpp"
#include "nn/attention/kernels/tile_gemm_f32.hpp"
#include "nn/attention/kernels/tile_scores.hpp"
#include "tensor/kernels.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::nn {
namespace {

namespace tk = attnlab::kernels;

// The validated pattern and the tile pairs it touches; shared by forward and backward.
struct Plan {
  int64_t N = 0, M = 0, TQ = 64, TK = 64, nq = 0, nk = 0;
  std::vector<int64_t> lo, hi, ex_lo, ex_hi, q_pos, k_pos;
  std::vector<int64_t> tile_lo, tile_hi;  // (nq): the keys query tile t may touch, [tile_lo, tile_hi)
  std::vector<int64_t> q2k_off, q2k;      // CSR: the key tiles of query tile t
  std::vector<int64_t> k2q_off, k2q;      // CSR: the query tiles of key tile kt (the transposed list)
  Tensor mask;                            // 4-d view (B|1, h|1, n_raw|1, m_raw|1), or undefined
  int64_t ms[4] = {0, 0, 0, 0};           // its strides, 0 along broadcast dims
  // Segment ids at the kernel's rows, per batch row b (empty without segments), and their
  // smallest and largest value in each query tile and key tile.
  std::vector<int64_t> qseg, kseg;        // (B N), (B M): ids of row i, key j at b N + i, b M + j
  std::vector<int64_t> qseg_lo, qseg_hi;  // (B nq)
  std::vector<int64_t> kseg_lo, kseg_hi;  // (B nk)
  bool odd_key_starts = false;            // some computed key tile starts at an odd key row

  int64_t qpos(int64_t i) const { return q_pos.empty() ? i : q_pos[i]; }
  int64_t kpos(int64_t j) const { return k_pos.empty() ? j : k_pos[j]; }
  bool has_ex() const { return !ex_lo.empty(); }
  // The columns [j0, j1) of key tile kt that query tile t computes.
  std::pair<int64_t, int64_t> cols(int64_t t, int64_t kt) const {
    return {std::max(kt * TK, tile_lo[t]), std::min((kt + 1) * TK, tile_hi[t])};
  }
  bool has_seg() const { return !qseg.empty(); }
  // In batch row b, query tile t and key tile kt share no segment id: every entry is disallowed.
  bool skip(int64_t b, int64_t t, int64_t kt) const {
    return has_seg() && (qseg_hi[b * nq + t] < kseg_lo[b * nk + kt] || kseg_hi[b * nk + kt] < qseg_lo[b * nq + t]);
  }
};

std::atomic<int64_t> forward_blocks{0};

// The segment ids of `ids` (B, >= rows) at `pos` (or 0..n-1), (B n), and their min and max per tile of `tile` rows.
void read_segments(const Tensor& ids, const char* name, int64_t B, int64_t n, const std::vector<int64_t>& pos,
                   int64_t rows, int64_t tile, std::vector<int64_t>& seg, std::vector<int64_t>& lo,
                   std::vector<int64_t>& hi) {
  if (ids.dtype() != kInt64)
    fail<DTypeError>("tile_attention: pattern.{} must be int64, got {}", name, dtype_name(ids.dtype()));
  if (ids.dim() != 2 || ids.size(0) != B || ids.size(1) < rows)
    fail<ShapeError>("tile_attention: pattern.{} must be (B={}, {}) segment ids, got {}", name, B, rows,
                     to_string(ids.shape()));
  const Tensor c = tk::contiguous(ids);
  const int64_t* p = c.data<int64_t>();
  const int64_t tiles = (n + tile - 1) / tile;
  seg.resize(B * n);
  lo.assign(B * tiles, std::numeric_limits<int64_t>::max());
  hi.assign(B * tiles, std::numeric_limits<int64_t>::min());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = p[b * c.size(1) + (pos.empty() ? i : pos[i])], t = b * tiles + i / tile;
      seg[b * n + i] = s;
      lo[t] = std::min(lo[t], s), hi[t] = std::max(hi[t], s);
    }
}

int64_t max_of(const std::vector<int64_t>& v) {
  int64_t m = -1;
  for (int64_t x : v) {
    if (x < 0) fail<ValueError>("tile_attention: pattern positions must be non-negative, got {}", x);
    m = std::max(m, x);
  }
  return m;
}

std::shared_ptr<const Plan> make_plan(const TilePattern& p, int64_t B, int64_t H, int64_t N, int64_t M,
                                      const TileOptions& o) {
  if (o.q_tile <= 0 || o.k_tile <= 0)
    fail<ValueError>("tile_attention: tile sizes must be positive, got q_tile={} k_tile={}", o.q_tile, o.k_tile);
  auto need = [](const std::vector<int64_t>& v, int64_t n, const char* name, bool optional) {
    if ((optional && v.empty()) || int64_t(v.size()) == n) return;
    fail<ValueError>("tile_attention: pattern.{} has {} entries, expected {}{}", name, v.size(), n,
                     optional ? " (or none)" : "");
  };
  need(p.lo, N, "lo", false);
  need(p.hi, N, "hi", false);
  need(p.ex_lo, N, "ex_lo", true);
  need(p.ex_hi, N, "ex_hi", p.ex_lo.empty());
  need(p.q_pos, N, "q_pos", true);
  need(p.k_pos, M, "k_pos", true);
  auto plan = std::make_shared<Plan>();
  Plan& P = *plan;
  P.N = N, P.M = M, P.TQ = o.q_tile, P.TK = o.k_tile;
  P.nq = (N + P.TQ - 1) / P.TQ;
  P.nk = (M + P.TK - 1) / P.TK;
  P.lo = p.lo, P.hi = p.hi, P.ex_lo = p.ex_lo, P.ex_hi = p.ex_hi, P.q_pos = p.q_pos, P.k_pos = p.k_pos;
  for (int64_t i = 0; i < N; ++i) {
    if (P.hi[i] < P.lo[i]) P.hi[i] = P.lo[i];  // empty
    if (P.lo[i] < 0 || P.hi[i] > M)
      fail<ValueError>("tile_attention: pattern row {} allows keys [{}, {}), outside the {} keys", i, P.lo[i],
                       P.hi[i], M);
    if (P.has_ex() && P.ex_hi[i] < P.ex_lo[i]) P.ex_hi[i] = P.ex_lo[i];
  }
  const int64_t qmax = max_of(P.q_pos), kmax = max_of(P.k_pos);

  if (p.mask.defined()) {
    const Tensor& m = p.mask;
    if (m.dtype() != kBool)
      fail<DTypeError>("tile_attention: the mask must be bool (true = may attend), got {}", dtype_name(m.dtype()));
    if (m.dim() > 4) fail<ShapeError>("tile_attention: the mask has {} dims, at most 4 (B, h, N, M)", m.dim());
    Dims shape = Dims::filled(4, 1), strides = Dims::filled(4, 0);
    for (int d = 0; d < m.dim(); ++d) {
      shape[4 - m.dim() + d] = m.size(d);
      strides[4 - m.dim() + d] = m.size(d) == 1 ? 0 : m.stride(d);
    }
    const int64_t rows = qmax >= 0 ? qmax + 1 : N, cols = kmax >= 0 ? kmax + 1 : M;
    if ((shape[0] != 1 && shape[0] != B) || (shape[1] != 1 && shape[1] != H) || (shape[2] != 1 && shape[2] < rows) ||
        (shape[3] != 1 && shape[3] < cols))
      fail<ShapeError>("tile_attention: mask of shape {} does not cover (B={}, h={}, n={}, m={})", to_string(m.shape()),
                       B, H, rows, cols);
    P.mask = m.as_strided(shape, strides, m.offset());
    for (int d = 0; d < 4; ++d) P.ms[d] = strides[d];
  }
  if (p.q_segments.defined() != p.k_segments.defined())
    fail<ValueError>("tile_attention: pattern.q_segments and pattern.k_segments must be given together");
  if (p.q_segments.defined()) {
    read_segments(p.q_segments, "q_segments", B, N, P.q_pos, qmax >= 0 ? qmax + 1 : N, P.TQ, P.qseg, P.qseg_lo,
                  P.qseg_hi);
    read_segments(p.k_segments, "k_segments", B, M, P.k_pos, kmax >= 0 ? kmax + 1 : M, P.TK, P.kseg, P.kseg_lo,
                  P.kseg_hi);
  }

  // Query tile t touches keys [min lo, max hi) over its non-empty rows, cut at key-tile bounds;
  // a pair (t, kt) is kept only if some row has an allowed key in it.
  P.tile_lo.assign(P.nq, 0);
  P.tile_hi.assign(P.nq, 0);
  P.q2k_off.assign(P.nq + 1, 0);
  for (int64_t t = 0; t < P.nq; ++t) {
    const int64_t i0 = t * P.TQ, i1 = std::min(N, i0 + P.TQ);
    int64_t L = M, R = 0;
    for (int64_t i = i0; i < i1; ++i)
      if (P.lo[i] < P.hi[i]) L = std::min(L, P.lo[i]), R = std::max(R, P.hi[i]);
    if (L < R) {
      P.tile_lo[t] = L, P.tile_hi[t] = R;
      for (int64_t kt = L / P.TK; kt * P.TK < R; ++kt) {
        auto [j0, j1] = P.cols(t, kt);
        bool useful = false;
        for (int64_t i = i0; i < i1 && !useful; ++i) {
          const int64_t a = std::max(P.lo[i], j0), e = std::min(P.hi[i], j1);
          useful = a < e && !(P.has_ex() && P.ex_lo[i] <= a && P.ex_hi[i] >= e);
        }
        if (useful) P.q2k.push_back(kt), P.odd_key_starts |= j0 % 2 != 0;
      }
    }
    P.q2k_off[t + 1] = int64_t(P.q2k.size());
  }
  P.k2q_off.assign(P.nk + 1, 0);
  for (int64_t kt : P.q2k) ++P.k2q_off[kt + 1];
  for (int64_t kt = 0; kt < P.nk; ++kt) P.k2q_off[kt + 1] += P.k2q_off[kt];
  P.k2q.resize(P.q2k.size());
  std::vector<int64_t> fill(P.k2q_off.begin(), P.k2q_off.end() - 1);
  for (int64_t t = 0; t < P.nq; ++t)
    for (int64_t e = P.q2k_off[t]; e < P.q2k_off[t + 1]; ++e) P.k2q[fill[P.q2k[e]]++] = t;
  return plan;
}

using tile::Rows;
using tile::kNegInf;

template <class T>
Rows<T> rows_of(const Tensor& t, int64_t extra_offset = 0) {
  return {static_cast<T*>(t.raw_data()) + extra_offset, t.stride(0), t.stride(1), t.stride(2)};
}
// A (B, h, N) tensor as rows of one element.
template <class T>
Rows<T> scalar_rows_of(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}

// t itself when its rows are contiguous and do not overlap, else a contiguous copy.
Tensor blas_ready(const Tensor& t) {
  const bool ok = t.size(3) == 0 || (t.stride(3) == 1 && (t.size(2) <= 1 || t.stride(2) >= t.size(3)));
  return ok ? t : tk::contiguous(t);
}

// C (m x n, ldc) = alpha op(A) op(B) + beta C. beta = 0 is done by memset (see matmul.cpp: it is
// faster than OpenBLAS's own pass over C).
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (beta == T(0))
    for (int64_t r = 0; r < m; ++r) std::memset(C + r * ldc, 0, n * sizeof(T));
  if (k == 0) return;
  auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tA, tB, m, n, k, alpha, A, lda, B, ldb, 1.0f, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, tA, tB, m, n, k, alpha, A, lda, B, ldb, 1.0, C, ldc);
}

// Per-thread scratch that outlives the call. A task's tiles (S and dP are 128 KB each at the
// default 128 x 256 tiles) would otherwise be allocated and page-faulted in again for every
// task chunk: glibc serves blocks of that size with a fresh mmap. A task body never waits on
// other tasks, so one thread never runs two bodies at once and a slot is never shared.
template <class T>
T* thread_scratch(int slot, size_t n) {
  thread_local std::vector<T> slots[7];
  std::vector<T>& buf = slots[slot];
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// The bf16 operands of one pass (tile_gemm_bf16.hpp), packed once from q, k, v (and dO), so a tile
// product packs only its score-sized operand. Key rows are packed from even rows and, when some
// key tile starts at an odd row, from odd rows too; query tiles start at even rows (q_tile even).
struct Bf16Operands {
  tile::PackedHeads q_rows, k_t, v_pairs, v_pairs_odd;                // scores, P V
  tile::PackedHeads do_rows, v_t, do_pairs, k_pairs, k_pairs_odd, q_pairs;  // backward: dP, dV, dQ, dK
};

// The float32 operands of one pass that the AVX-512 products (tile_gemm_f32.hpp) read transposed:
// k and v in panels of one key tile, (B, g, nk, d, ld), packed once per call. Every other operand
// is read in place.
struct F32Operands {
  Tensor k_t, v_t;  // (B, g, nk, dk, ld), (B, g, nk, dv, ld); v_t in the backward only
  int64_t TK = 0, nk = 0, ld = 0;  // the key tile, tiles per head, tile::transposed_ld(min(TK, M))

  // The panel of key tile j0 / TK of kv head (b, hk) in t, at key j0: (d, ld).
  const float* at(const Tensor& t, int64_t G, int64_t b, int64_t hk, int64_t d, int64_t j0) const {
    return t.data<float>() + (((b * G + hk) * nk + j0 / TK) * d) * ld + j0 % TK;
  }
};

// Everything one call shares: sizes, the plan, and the tensors as row views.
template <class T>
struct Ctx {
  const Plan* P;
  int64_t B, H, G, dk, dv;  // H query heads, G key/value heads (G divides H)
  T scale;
  double dropout;
  uint64_t seed;
  Rows<T> Q, K, V, O, L;  // L: lse, "rows" of one element (sr = its stride along N)
  const bool* mask = nullptr;
  std::vector<T> slopes;  // (H) ALiBi slopes, or empty
  T softcap = 0;          // 0 = off
  const Bf16Operands* bf = nullptr;  // float32 under autocast: the products in bf16, else null
  const F32Operands* f32 = nullptr;  // float32 on AVX-512 (not bf16): the products of tile_gemm_f32.hpp, else null

  // The key/value head that query head h reads.
  int64_t kv(int64_t h) const { return h / (H / G); }

  // The six products of a tile pair (r query rows from i0, c keys from j0), in three forms: in T
  // through BLAS; in bf16 from bf's packs and the tile (W) packed here; or in float32 from the
  // operands in place (f32: only X^T is packed).
  //   out (r, c) = alpha Y_t X_c^T: Y the query rows i0 ... (Q for S, dO for dP), X the keys' rows
  //   j0 ... (K, V), of width d, packed as `ys`, `xs` (bf16) or transposed as `xt` (f32)
  void queries_times_keys_t(T* out, T alpha, const Rows<T>& Y, const Rows<T>& X, int64_t d,
                            tile::PackedHeads Bf16Operands::*ys, tile::PackedHeads Bf16Operands::*xs,
                            Tensor F32Operands::*xt, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0,
                            int64_t c) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf) {
        const tile::PackedHeads &y = bf->*ys, &x = bf->*xs;
        tile::gemm_bf16(r, c, (d + 1) / 2, alpha, y.at(b, h, i0), y.ld, 1, x.at(b, kv(h), 0) + j0, x.ld, false, out, c);
        return;
      }
      if (f32) {
        const float* panel = f32->at(f32->*xt, G, b, kv(h), d, j0);  // (d, ld), from key j0
        tile::gemm_f32(r, c, d, alpha, Y.row(b, h, i0), Y.sr, 1, panel, f32->ld, false, out, c);
        return;
      }
    }
    gemm<T>(false, true, r, c, d, alpha, Y.row(b, h, i0), Y.sr, X.row(b, kv(h), j0), X.sr, T(0), out, c);
  }
  //   out (r, d) += W (r, c) X_c: X the keys' rows j0 ... (V for P V, K for dQ), packed as `even`, `odd`
  void w_times_keys(T* out, const T* W, const Rows<T>& X, int64_t d, tile::PackedHeads Bf16Operands::*even,
                    tile::PackedHeads Bf16Operands::*odd, int64_t b, int64_t h, int64_t r, int64_t j0, int64_t c) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf) {
        const int64_t c2 = (c + 1) / 2;
        uint32_t* w = thread_scratch<uint32_t>(0, r * c2);
        tile::pack_pairs_in_rows(W, c, r, c, w, c2);
        tile::gemm_bf16(r, d, c2, 1.0f, w, c2, 1, tile::rows_from(bf->*even, bf->*odd, b, kv(h), j0), d, true, out, d);
        return;
      }
      if (f32) return tile::gemm_f32(r, d, c, 1.0f, W, c, 1, X.row(b, kv(h), j0), X.sr, true, out, d);
    }
    gemm<T>(false, false, r, d, c, T(1), W, c, X.row(b, kv(h), j0), X.sr, T(1), out, d);
  }
  //   out (c, d) += W (r, c)^T Y_t: Y the query rows i0 ... (dO for dV, Q for dK), packed as `pairs`
  void wt_times_queries(T* out, const T* W, const Rows<T>& Y, int64_t d, tile::PackedHeads Bf16Operands::*pairs,
                        int64_t b, int64_t h, int64_t i0, int64_t r, int64_t c) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf) {
        const int64_t r2 = (r + 1) / 2;
        uint32_t* w = thread_scratch<uint32_t>(1, r2 * c);
        tile::pack_pairs_across_rows(W, c, r, c, w, c);
        tile::gemm_bf16(c, d, r2, 1.0f, w, 1, c, (bf->*pairs).at(b, h, i0 / 2), d, true, out, d);
        return;
      }
      if (f32) return tile::gemm_f32(c, d, r, 1.0f, W, 1, c, Y.row(b, h, i0), Y.sr, true, out, d);
    }
    gemm<T>(true, false, c, d, r, T(1), W, c, Y.row(b, h, i0), Y.sr, T(1), out, d);
  }

  // S (r x c, ld c) = scale Q_t K_c^T, minus the ALiBi distances, soft-capped (F (r x c), when
  // given, gets the cap's derivative 1 - (S / c)^2), then -inf wherever the rule disallows
  // (i0 + ii, j0 + j).
  void scores(T* S, T* F, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t c) const {
    queries_times_keys_t(S, scale, Q, K, dk, &Bf16Operands::q_rows, &Bf16Operands::k_t, &F32Operands::k_t, b, h, i0,
                         r, j0, c);
    const Plan& p = *P;
    if (!slopes.empty()) {
      const T slope = slopes[h];
      for (int64_t ii = 0; ii < r; ++ii) {
        const int64_t n = p.qpos(i0 + ii);
        for (int64_t j = 0; j < c; ++j) S[ii * c + j] -= slope * T(std::abs(n - p.kpos(j0 + j)));
      }
    }
    if (softcap > 0) {
      const T inv = T(1) / softcap;
      for (int64_t a = 0; a < r * c; ++a) S[a] *= inv;
      fastmath::tanh_block(S, S, r * c);  // t = tanh(S / c)
      for (int64_t a = 0; a < r * c; ++a) {
        const T t = S[a];
        S[a] = softcap * t;
        if (F) F[a] = T(1) - t * t;
      }
    }
    const bool* mbh = mask ? mask + b * p.ms[0] + h * p.ms[1] : nullptr;
    for (int64_t ii = 0; ii < r; ++ii) {
      const int64_t i = i0 + ii;
      T* row = S + ii * c;
      const int64_t a = std::clamp(p.lo[i] - j0, int64_t{0}, c), e = std::clamp(p.hi[i] - j0, a, c);
      std::fill(row, row + a, kNegInf<T>);
      std::fill(row + e, row + c, kNegInf<T>);
      if (p.has_ex()) {
        const int64_t xa = std::clamp(p.ex_lo[i] - j0, a, e), xe = std::clamp(p.ex_hi[i] - j0, xa, e);
        std::fill(row + xa, row + xe, kNegInf<T>);
      }
      if (mbh) {
        const bool* mrow = mbh + p.qpos(i) * p.ms[2];
        for (int64_t j = a; j < e; ++j)
          if (!mrow[p.kpos(j0 + j) * p.ms[3]]) row[j] = kNegInf<T>;
      }
      if (p.has_seg()) {
        const int64_t s = p.qseg[b * p.N + i];
        const int64_t* ks = p.kseg.data() + b * p.M + j0;
        for (int64_t j = a; j < e; ++j)
          if (ks[j] != s) row[j] = kNegInf<T>;
      }
    }
  }

  // Dropout multipliers Z (r x c) for the block, keep / (1 - rate).
  void dropout_block(T* Z, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t c) const {
    const T inv = T(1.0 / (1.0 - dropout));
    for (int64_t ii = 0; ii < r; ++ii) {
      const uint64_t key = tile_dropout_row_key(seed, b, h, P->qpos(i0 + ii));
      for (int64_t j = 0; j < c; ++j) Z[ii * c + j] = tile_dropout_keep_key(key, P->kpos(j0 + j), dropout) ? inv : T(0);
    }
  }

  // S (r x c) *= the dropout multipliers, in place.
  void drop(T* S, int64_t b, int64_t h, int64_t i0, int64_t r, int64_t j0, int64_t c) const {
    const T inv = T(1.0 / (1.0 - dropout));
    for (int64_t ii = 0; ii < r; ++ii) {
      const uint64_t key = tile_dropout_row_key(seed, b, h, P->qpos(i0 + ii));
      for (int64_t j = 0; j < c; ++j) S[ii * c + j] *= tile_dropout_keep_key(key, P->kpos(j0 + j), dropout) ? inv : T(0);
    }
  }
};

// Query tiles per forward task: up to 4, while there are at least 4 tasks per thread. A task's
// tiles share each key tile's K and V while they are in cache (a group of 4 at 128 x 256 tiles
// keeps its state, scores and one key tile in about 0.5 MB); the arithmetic of each tile is the
// same for any group size.
int64_t forward_group(int64_t bh, int64_t nq) {
  int64_t g = 4;
  while (g > 1 && bh * ((nq + g - 1) / g) < 4 * int64_t(num_threads())) g /= 2;
  return g;
}

// The forward pass for score policy `score` (tile_scores.hpp): per (b, h, group of query tiles),
// the key tiles in order, each (query tile, key tile) block's scores turned into weights by the
// policy and multiplied into that tile's acc; every query tile sees its key tiles in order.
template <class T, class Score>
void forward_pass(const Ctx<T>& x, const Score& score) {
  const Plan& P = *x.P;
  const int64_t dv = x.dv, group = forward_group(x.B * x.H, P.nq), per_bh = (P.nq + group - 1) / group;
  parallel_for(x.B * x.H * per_bh, 1, [&](int64_t t0, int64_t t1) {
    T* const S = thread_scratch<T>(0, P.TQ * P.TK);          // (TQ, TK) scores, then weights
    T* const acc = thread_scratch<T>(1, group * P.TQ * dv);  // (group, TQ, dv) running numerators
    T* const mrun = thread_scratch<T>(2, group * P.TQ);      // (group, TQ) running max (softpick: c)
    T* const lrun = thread_scratch<T>(3, group * P.TQ);      // (group, TQ) running normaliser
    int64_t blocks = 0;                                      // computed (query tile, key tile) pairs, for tests
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / (x.H * per_bh), h = task / per_bh % x.H;
      const int64_t first = task % per_bh * group, tiles = std::min(group, P.nq - first);
      int64_t next[4];  // per tile u of the group: its next entry in the tile list
      for (int64_t u = 0; u < tiles; ++u) {
        next[u] = P.q2k_off[first + u];
        std::fill(acc + u * P.TQ * dv, acc + (u + 1) * P.TQ * dv, T(0));
        std::fill(mrun + u * P.TQ, mrun + (u + 1) * P.TQ, score.start_max(h));
        std::fill(lrun + u * P.TQ, lrun + (u + 1) * P.TQ, score.start_sum());
      }
      for (;;) {  // the smallest key tile any tile of the group has left, for every tile that has it
        int64_t kt = P.nk;
        for (int64_t u = 0; u < tiles; ++u)
          if (next[u] < P.q2k_off[first + u + 1]) kt = std::min(kt, P.q2k[next[u]]);
        if (kt == P.nk) break;
        for (int64_t u = 0; u < tiles; ++u) {
          const int64_t t = first + u;
          if (next[u] == P.q2k_off[t + 1] || P.q2k[next[u]] != kt) continue;
          ++next[u];
          if (P.skip(b, t, kt)) continue;  // no shared segment: every entry disallowed
          ++blocks;
          const int64_t i0 = t * P.TQ, r = std::min(P.TQ, P.N - i0);
          auto [j0, j1] = P.cols(t, kt);
          const int64_t c = j1 - j0;
          T *a = acc + u * P.TQ * dv, *m = mrun + u * P.TQ, *l = lrun + u * P.TQ;
          x.scores(S, nullptr, b, h, i0, r, j0, c);  // (r, c)
          score.block(S, r, c, m, l, a, dv);         // (r, c) weights
          if (x.dropout > 0) x.drop(S, b, h, i0, r, j0, c);  // the normaliser l uses the undropped weights
          x.w_times_keys(a, S, x.V, dv, &Bf16Operands::v_pairs, &Bf16Operands::v_pairs_odd, b, h, r, j0, c);
        }
      }
      for (int64_t u = 0; u < tiles; ++u) {
        const int64_t i0 = (first + u) * P.TQ, r = std::min(P.TQ, P.N - i0);
        for (int64_t ii = 0; ii < r; ++ii)
          score.finish(acc + (u * P.TQ + ii) * dv, mrun[u * P.TQ + ii], lrun[u * P.TQ + ii], dv,
                       x.O.row(b, h, i0 + ii), x.L.row(b, h, i0 + ii), b, h, i0 + ii);
      }
    }
    forward_blocks += blocks;
  });
}

// dQ, dK, dV from dO (and dlse). D (B*h*N) holds rowsum(dO * O) - dlse. dQ (B, h, N, dk) and
// dK, dV (B, g, M, dk|dv) are contiguous and zero on entry.
//
// Two schemes, chosen by the amount of parallel work, with the same arithmetic in the same
// order (so the result does not depend on the choice):
//  - fused, when there are at least two (b, kv head) pairs per thread: one task per (b, kv head)
//    walks the group's query heads, for each the key tiles in order and, per key tile, the query
//    tiles that touch it (the transposed tile list), and adds every pair's dQ, dK, dV terms (5
//    products per pair). The key tile's K, V, their transposes, dK and dV stay in cache while the
//    query tiles pass; each dQ tile still gets its key tiles in order;
//  - split, otherwise: dQ over (b, h, query tile), then dK and dV over (b, kv head, key tile),
//    each task looping over the group's query heads and the transposed tile list (7 products
//    per pair, but every tile is its own task).
template <class T, class Score>
void backward_pass(const Ctx<T>& x, const Score& score, const Rows<T>& dO, const T* D, const Rows<T>& dQ, const Rows<T>& dK,
                   const Rows<T>& dV, bool want_q, bool want_kv) {
  const Plan& P = *x.P;
  const int64_t dk = x.dk, N = P.N, group = x.H / x.G;
  const bool drop = x.dropout > 0, cap = x.softcap > 0;
  struct Scratch {
    T *S, *dP, *Z, *F, *G;  // (TQ, TK) each: P then dS, dP, the dropout multipliers, the softcap
                            // derivative, softpick's scores
  };
  auto scratch = [&] {
    const size_t tile = P.TQ * P.TK;
    return Scratch{thread_scratch<T>(0, tile), thread_scratch<T>(1, tile), thread_scratch<T>(4, drop ? tile : 0),
                   thread_scratch<T>(5, cap ? tile : 0), thread_scratch<T>(6, Score::needs_scores ? tile : 0)};
  };
  // One tile pair (query tile t, key tile kt) of query head h: recompute P, then
  //   gv (c, dv) += (P * Z)^T dO_t;  dS = score.grad(P, S, dP * Z, D, ...) (softmax: P * (dP * Z - D)),
  //   times F with softcap;  gq (r, dk) += dS K_c;  gk (c, dk) += dS^T Q_t
  // for whichever of gq, gk, gv is given (rows of width dk, dv, dk; unscaled).
  auto pair = [&](Scratch& s, int64_t b, int64_t h, int64_t t, int64_t kt, T* gq, T* gk, T* gv) {
    if (P.skip(b, t, kt)) return;  // no shared segment: every entry disallowed, nothing to add
    const int64_t i0 = t * P.TQ, r = std::min(P.TQ, N - i0);
    auto [j0, j1] = P.cols(t, kt);
    const int64_t c = j1 - j0;
    T *S = s.S, *dP = s.dP, *Z = drop ? s.Z : nullptr, *F = cap ? s.F : nullptr;
    x.scores(S, F, b, h, i0, r, j0, c);
    if constexpr (Score::needs_scores) std::copy(S, S + r * c, s.G);
    for (int64_t ii = 0; ii < r; ++ii) score.probabilities(S + ii * c, c, *x.L.row(b, h, i0 + ii));  // P (r, c)
    if (drop) x.dropout_block(Z, b, h, i0, r, j0, c);
    if (gv) {
      const T* PZ = S;
      if (drop) {
        for (int64_t a = 0; a < r * c; ++a) dP[a] = S[a] * Z[a];  // P * Z, before dP needs the buffer
        PZ = dP;
      }
      x.wt_times_queries(gv, PZ, dO, x.dv, &Bf16Operands::do_pairs, b, h, i0, r, c);
    }
    x.queries_times_keys_t(dP, T(1), dO, x.V, x.dv, &Bf16Operands::do_rows, &Bf16Operands::v_t, &F32Operands::v_t, b,
                           h, i0, r, j0, c);
    const T* Db = D + (b * x.H + h) * N + i0;
    for (int64_t ii = 0; ii < r; ++ii) {
      const T lse = *x.L.row(b, h, i0 + ii), cmax = score.row_c(b, h, i0 + ii);
      for (int64_t j = 0; j < c; ++j) {
        const int64_t at = ii * c + j;
        const T dp = drop ? dP[at] * Z[at] : dP[at];
        S[at] = score.grad(S[at], Score::needs_scores ? s.G[at] : T(0), dp, Db[ii], lse, cmax);  // dS (r, c)
        if (cap) S[at] *= F[at];
      }
    }
    if (gq) x.w_times_keys(gq, S, x.K, dk, &Bf16Operands::k_pairs, &Bf16Operands::k_pairs_odd, b, h, r, j0, c);
    if (gk) x.wt_times_queries(gk, S, x.Q, dk, &Bf16Operands::q_pairs, b, h, i0, r, c);
  };
  auto scale_rows = [&](const Rows<T>& g, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t d) {
    for (int64_t i = i0; i < i0 + rows; ++i) {
      T* row = g.row(b, h, i);
      for (int64_t e = 0; e < d; ++e) row[e] *= x.scale;
    }
  };

  if (x.B * x.G >= 2 * int64_t(num_threads())) {
    parallel_for(x.B * x.G, 1, [&](int64_t t0, int64_t t1) {
      Scratch s = scratch();
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t b = task / x.G, hk = task % x.G;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          for (int64_t kt = 0; kt < P.nk; ++kt)
            for (int64_t e = P.k2q_off[kt]; e < P.k2q_off[kt + 1]; ++e) {
              const int64_t t = P.k2q[e], j0 = P.cols(t, kt).first;
              pair(s, b, h, t, kt, want_q ? dQ.row(b, h, t * P.TQ) : nullptr, want_kv ? dK.row(b, hk, j0) : nullptr,
                   want_kv ? dV.row(b, hk, j0) : nullptr);
            }
          if (want_q) scale_rows(dQ, b, h, 0, N, dk);
        }
        if (want_kv) scale_rows(dK, b, hk, 0, P.M, dk);
      }
    });
    return;
  }
  if (want_q) {
    parallel_for(x.B * x.H * P.nq, 1, [&](int64_t t0, int64_t t1) {
      Scratch s = scratch();
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t b = task / (x.H * P.nq), h = task / P.nq % x.H, t = task % P.nq;
        for (int64_t e = P.q2k_off[t]; e < P.q2k_off[t + 1]; ++e)
          pair(s, b, h, t, P.q2k[e], dQ.row(b, h, t * P.TQ), nullptr, nullptr);
        scale_rows(dQ, b, h, t * P.TQ, std::min(P.TQ, N - t * P.TQ), dk);
      }
    });
  }
  if (want_kv) {
    parallel_for(x.B * x.G * P.nk, 1, [&](int64_t t0, int64_t t1) {
      Scratch s = scratch();
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t b = task / (x.G * P.nk), hk = task / P.nk % x.G, kt = task % P.nk;
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
          for (int64_t e = P.k2q_off[kt]; e < P.k2q_off[kt + 1]; ++e) {
            const int64_t t = P.k2q[e], j0 = P.cols(t, kt).first;
            pair(s, b, h, t, kt, nullptr, dK.row(b, hk, j0), dV.row(b, hk, j0));
          }
        scale_rows(dK, b, hk, kt * P.TK, std::min(P.TK, P.M - kt * P.TK), dk);
      }
    });
  }
}

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  if (!q.defined() || !k.defined() || !v.defined() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail<ShapeError>("{}: q, k, v must be 4-d (B, h, N, d), got {}, {}, {}", op,
                     q.defined() ? to_string(q.shape()) : "undefined", k.defined() ? to_string(k.shape()) : "undefined",
                     v.defined() ? to_string(v.shape()) : "undefined");
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != v.size(1) || k.size(1) == 0 ||
      q.size(1) % k.size(1) != 0 || k.size(3) != q.size(3) || v.size(2) != k.size(2))
    fail<ShapeError>("{}: expected q (B, h, N, dk), k (B, g, M, dk), v (B, g, M, dv) with g dividing h; got {}, {}, {}",
                     op, to_string(q.shape()), to_string(k.shape()), to_string(v.shape()));
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail<DTypeError>("{}: q, k, v must share a dtype, got {}, {}, {}", op, dtype_name(q.dtype()),
                     dtype_name(k.dtype()), dtype_name(v.dtype()));
  if (!q.is_floating_point()) fail<DTypeError>("{}: expected float32 or float64, got {}", op, dtype_name(q.dtype()));
}

double scale_of(const TileOptions& o, int64_t dk) { return o.scale != 0 ? o.scale : 1.0 / std::sqrt(double(dk)); }

const char* score_name(TileScore s) {
  return s == TileScore::Sigmoid ? "sigmoid" : s == TileScore::Softpick ? "softpick" : "softmax";
}

// The options against each other and against h query heads.
void check_options(const TileOptions& o, int64_t heads, DType dtype, const char* op) {
  if (!(o.dropout >= 0 && o.dropout < 1)) fail<ValueError>("{}: dropout must be in [0, 1), got {}", op, o.dropout);
  if (!o.alibi.empty() && int64_t(o.alibi.size()) != heads)
    fail<ValueError>("{}: alibi has {} slopes, expected one per head ({})", op, o.alibi.size(), heads);
  if (!(o.softcap >= 0) || std::isinf(o.softcap))
    fail<ValueError>("{}: softcap must be a finite c >= 0 (0 = off), got {}", op, o.softcap);
  if (o.sinks.defined()) {
    if (o.score != TileScore::Softmax) fail<ValueError>("{}: sinks need score softmax, got {}", op, score_name(o.score));
    if (o.sinks.dim() != 1 || o.sinks.size(0) != heads)
      fail<ShapeError>("{}: sinks must be (h) = ({}), got {}", op, heads, to_string(o.sinks.shape()));
    if (o.sinks.dtype() != dtype)
      fail<DTypeError>("{}: sinks must have the dtype of q, {}, got {}", op, dtype_name(dtype), dtype_name(o.sinks.dtype()));
  }
  if (o.score != TileScore::Softmax && o.need_lse)
    fail<ValueError>("{}: score {} has no lse (need_lse)", op, score_name(o.score));
  if (!(o.softpick_eps > 0)) fail<ValueError>("{}: softpick_eps must be > 0, got {}", op, o.softpick_eps);
}

}  // namespace

namespace {
// q, k, v or dO (B, heads, n, >= d; rows contiguous), its first d columns packed for every head.
tile::PackedHeads pack(const Tensor& t, int64_t d, tile::PackKind kind) {
  return tile::pack_heads(static_cast<const float*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2), t.size(0),
                          t.size(1), t.size(2), d, kind);
}

Bf16Operands forward_operands(const Tensor& q, const Tensor& k, const Tensor& v, bool odd_key_starts) {
  using tile::PackKind;
  Bf16Operands o;
  o.q_rows = pack(q, q.size(3), PackKind::InRows);
  o.k_t = pack(k, k.size(3), PackKind::InRowsT);
  o.v_pairs = pack(v, v.size(3), PackKind::AcrossRows);
  if (odd_key_starts) o.v_pairs_odd = pack(v, v.size(3), PackKind::AcrossRowsShifted);
  return o;
}

// k or v (B, g, M, d; rows contiguous) transposed in panels of TK keys, (B, g, nk, d, ld), for the
// AVX-512 products.
Tensor transposed(const Tensor& t, int64_t TK) {
  const int64_t d = t.size(3), nk = (t.size(2) + TK - 1) / TK;
  Tensor out = Tensor::empty({t.size(0), t.size(1), nk, d, tile::transposed_ld(std::min(TK, t.size(2)))}, kFloat32);
  tile::transpose_heads(static_cast<const float*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2), t.size(0),
                        t.size(1), t.size(2), d, TK, static_cast<float*>(out.raw_data()));
  return out;
}

// dO (B, h, N, dv [+ 1]): the lse column, when there, is not a product's operand.
Bf16Operands backward_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dO,
                               bool odd_key_starts) {
  using tile::PackKind;
  Bf16Operands o;
  const int64_t dk = q.size(3), dv = v.size(3);
  o.q_rows = pack(q, dk, PackKind::InRows);
  o.k_t = pack(k, dk, PackKind::InRowsT);
  o.do_rows = pack(dO, dv, PackKind::InRows);
  o.v_t = pack(v, dv, PackKind::InRowsT);
  o.do_pairs = pack(dO, dv, PackKind::AcrossRows);
  o.k_pairs = pack(k, dk, PackKind::AcrossRows);
  if (odd_key_starts) o.k_pairs_odd = pack(k, dk, PackKind::AcrossRowsShifted);
  o.q_pairs = pack(q, dk, PackKind::AcrossRows);
  return o;
}

// The (query row, key) pairs the bands allow, per (b, h). The user mask is not read, so
// masked-out pairs inside the bands still count.
int64_t pattern_pairs(const TilePattern& p, int64_t n, int64_t m) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::clamp<int64_t>(p.lo[i], 0, m), hi = std::clamp<int64_t>(p.hi[i], lo, m);
    int64_t row = hi - lo;
    if (!p.ex_lo.empty()) row -= std::max<int64_t>(0, std::min(hi, p.ex_hi[i]) - std::max(lo, p.ex_lo[i]));
    pairs += row;
  }
  return pairs;
}

// The FLOPs the op stands for, counted like the composed formula over the allowed pairs only
// (attnlab explain, autograd/trace.hpp): per pair 2 dk (score), 5 (softmax), 2 dv (P V).
int64_t pattern_flops(const TilePattern& p, int64_t batch_heads, int64_t n, int64_t m, int64_t dk, int64_t dv) {
  return batch_heads * pattern_pairs(p, n, m) * (2 * dk + 5 + 2 * dv);
}
}  // namespace

TileAttentionResult tile_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0, const TilePattern& pattern,
                                   const TileOptions& opt) {
  check_qkv(q0, k0, v0, "tile_attention");
  check_options(opt, q0.size(1), q0.dtype(), "tile_attention");
  const int64_t B = q0.size(0), H = q0.size(1), G = k0.size(1), N = q0.size(2), dk = q0.size(3), M = k0.size(2),
                dv = v0.size(3);
  auto plan = make_plan(pattern, B, H, N, M, opt);
  const double scale = scale_of(opt, dk);
  Tensor q = blas_ready(q0.detach()), k = blas_ready(k0.detach()), v = blas_ready(v0.detach());
  const DType dt = q.dtype();
  // With need_lse, out and lse share one (B, h, N, dv + 1) result, so that one node has both.
  const int64_t width = opt.need_lse ? dv + 1 : dv;
  Tensor result = Tensor::empty({B, H, N, width}, dt);               // (B, h, N, dv [+ 1])
  Tensor lse_store = opt.need_lse ? Tensor() : Tensor::empty({B, H, N}, dt);  // (B, h, N)
  const Tensor sinks = opt.sinks.defined() ? tk::contiguous(opt.sinks.detach()) : Tensor();  // (h)
  const Tensor cmax = opt.score == TileScore::Softpick ? Tensor::empty({B, H, N}, dt) : Tensor();  // (B, h, N) softpick's c
  auto make_ctx = [=](auto tag, const Tensor& res, const Tensor& lse) {
    using T = decltype(tag);
    return Ctx<T>{
        .P = plan.get(), .B = B, .H = H, .G = G, .dk = dk, .dv = dv,
        .scale = T(scale), .dropout = opt.dropout, .seed = opt.seed,
        .Q = rows_of<T>(q), .K = rows_of<T>(k), .V = rows_of<T>(v), .O = rows_of<T>(res),
        .L = lse.defined() ? scalar_rows_of<T>(lse) : rows_of<T>(res, dv),  // or column dv of the packed result
        .mask = plan->mask.defined() ? static_cast<const bool*>(plan->mask.raw_data()) : nullptr,
        .slopes = std::vector<T>(opt.alibi.begin(), opt.alibi.end()),
        .softcap = T(opt.softcap)};
  };
  // Calls f with the score policy of opt.score (tile_scores.hpp).
  auto with_score = [=](auto tag, auto&& f) {
    using T = decltype(tag);
    switch (opt.score) {
      case TileScore::Sigmoid:
        return f(tile::SigmoidScore<T>{.bias = T(opt.sigmoid_bias)});
      case TileScore::Softpick:
        return f(tile::SoftpickScore<T>{.eps = T(opt.softpick_eps), .C = scalar_rows_of<T>(cmax)});
      case TileScore::Softmax:
        break;
    }
    return f(tile::SoftmaxScore<T>{
        .sinks = sinks.defined() ? std::vector<T>(sinks.data<T>(), sinks.data<T>() + H) : std::vector<T>()});
  };
  // Under autocast the products run in bf16 (float32 sums) where the rows have enough keys to pay
  // for the packing (tile_gemm_bf16.hpp, the size rule); the backward follows the forward.
  const bool bf16 = tile_attention_runs_bf16(dt, opt) &&
                    pattern_pairs(pattern, N, M) >= tile::bf16_min_keys_per_row() * N;
  // Otherwise float32 products run on AVX-512 from the operands in place where the CPU has it
  // (tile_gemm_f32.hpp), and through cblas_sgemm where it does not.
  const bool f32 = dt == kFloat32 && !bf16 && tile::f32_tile_products_available();
  dispatch_floating(dt, "tile_attention", [&](auto tag) {
    auto x = make_ctx(tag, result, lse_store);
    Bf16Operands ops;
    F32Operands f32_ops;
    if (bf16) {
      ops = forward_operands(q, k, v, plan->odd_key_starts);
      x.bf = &ops;
    } else if (f32) {
      f32_ops = {.k_t = transposed(k, plan->TK), .v_t = Tensor(), .TK = plan->TK, .nk = plan->nk,
                 .ld = tile::transposed_ld(std::min(plan->TK, M))};
      x.f32 = &f32_ops;
    }
    with_score(tag, [&](const auto& score) { forward_pass(x, score); });
  });

  const bool need_lse = opt.need_lse;
  Tensor saved = result.detach();
  const bool has_sinks = sinks.defined();
  const Tensor saved_sinks = sinks;
  auto backward = [q, k, v, saved, lse_store, plan, make_ctx, with_score, saved_sinks, need_lse, has_sinks, bf16, f32, B, H, G, N, dk, dv, M](
                      const Tensor& g0, const Tensor&, const Node& node) {
    const bool want_q = node.needs_grad(0), want_kv = node.needs_grad(1) || node.needs_grad(2);
    const bool want_sinks = has_sinks && node.needs_grad(3);
    const DType dt = q.dtype();
    Tensor g = tk::contiguous(g0);  // (B, h, N, dv [+ 1])
    Tensor dq = want_q ? zeros({B, H, N, dk}, dt) : Tensor();
    Tensor dkt = want_kv ? zeros({B, G, M, dk}, dt) : Tensor();
    Tensor dvt = want_kv ? zeros({B, G, M, dv}, dt) : Tensor();
    Tensor dsinks = want_sinks ? zeros({H}, dt) : Tensor();
    dispatch_floating(dt, "tile_attention_backward", [&](auto tag) {
      using T = decltype(tag);
      Ctx<T> x = make_ctx(tag, saved, lse_store);
      Rows<T> dO = rows_of<T>(g);
      Bf16Operands ops;
      F32Operands f32_ops;
      if (bf16) {
        ops = backward_operands(q, k, v, g, plan->odd_key_starts);
        x.bf = &ops;
      } else if (f32) {
        f32_ops = {.k_t = transposed(k, plan->TK), .v_t = transposed(v, plan->TK), .TK = plan->TK, .nk = plan->nk,
                   .ld = tile::transposed_ld(std::min(plan->TK, M))};
        x.f32 = &f32_ops;
      }
      // D_i = rowsum(dO_i * O_i) - dlse_i: the softmax backward's row term, with lse's own
      // gradient folded in (d lse_i / d S_ij = P_ij).
      std::vector<T> D(B * H * N);
      parallel_for(B * H * N, 4096, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / (H * N), h = r / N % H, i = r % N;
          const T* go = dO.row(b, h, i);
          const T* o = x.O.row(b, h, i);
          T s = 0;
          for (int64_t d = 0; d < dv; ++d) s += go[d] * o[d];
          D[r] = need_lse ? s - go[dv] : s;
        }
      });
      Rows<T> none;
      with_score(tag, [&](const auto& score) {
        backward_pass(x, score, dO, D.data(), want_q ? rows_of<T>(dq) : none, want_kv ? rows_of<T>(dkt) : none,
                      want_kv ? rows_of<T>(dvt) : none, want_q, want_kv);
      });
      if (want_sinks) {  // d sink_h = -sum_{b, i} e^(sink_h - lse_i) D_i (the sink's probability times D)
        const Tensor sinks = tk::contiguous(saved_sinks);  // (h)
        const T* sk = sinks.data<T>();
        T* ds = dsinks.data<T>();
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < N; ++i) ds[h] -= std::exp(sk[h] - *x.L.row(b, h, i)) * D[(b * H + h) * N + i];
      }
    });
    Grads grads{dq, node.needs_grad(1) ? dkt : Tensor(), node.needs_grad(2) ? dvt : Tensor()};
    if (has_sinks) grads.push_back(dsinks);
    return grads;
  };
  std::vector<Tensor> inputs = {q0, k0, v0};
  if (has_sinks) inputs.push_back(opt.sinks);
  result = record("tile_attention", result, std::span<const Tensor>(inputs), std::move(backward));
  if (OpTrace* trace = active_op_trace()) trace->annotate_flops(pattern_flops(pattern, B * H, N, M, dk, dv));

  TileAttentionResult out;
  if (need_lse) {
    out.out = narrow(result, -1, 0, dv);  // (B, h, N, dv)
    out.lse = select(result, -1, dv);     // (B, h, N)
  } else {
    out.out = result;
  }
  return out;
}

int64_t tile_attention_forward_blocks() { return forward_blocks.load(); }

bool tile_attention_runs_bf16(DType dtype, const TileOptions& options) {
  return dtype == kFloat32 && AutocastMode::is_enabled() && options.q_tile % 2 == 0 &&
         tile::bf16_tile_products_available();
}

TilePattern dense_tile_pattern(int64_t n, int64_t m, bool causal, const Tensor& mask, const Tensor& segment_ids) {
  TilePattern pattern;
  pattern.q_segments = pattern.k_segments = segment_ids;
  pattern.lo.assign(n, 0);
  pattern.hi.resize(n);
  for (int64_t i = 0; i < n; ++i) pattern.hi[i] = causal ? std::min(i + 1, m) : m;
  pattern.mask = mask;
  return pattern;
}

Tensor tile_pattern_dense(const TilePattern& p, int64_t n, int64_t m, int64_t batch, int64_t heads) {
  auto plan = make_plan(p, batch, heads, n, m, TileOptions{});
  const Plan& P = *plan;
  const int64_t Bm = P.has_seg() ? batch : P.mask.defined() ? P.mask.size(0) : 1;
  const int64_t Hm = P.mask.defined() ? P.mask.size(1) : 1;
  Tensor out = zeros({Bm, Hm, n, m}, kBool);  // (B|1, h|1, N, M)
  bool* po = out.data<bool>();
  const bool* pm = P.mask.defined() ? static_cast<const bool*>(P.mask.raw_data()) : nullptr;
  for (int64_t b = 0; b < Bm; ++b)
    for (int64_t h = 0; h < Hm; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
          bool ok = j >= P.lo[i] && j < P.hi[i];
          if (P.has_ex()) ok = ok && !(j >= P.ex_lo[i] && j < P.ex_hi[i]);
          if (pm) ok = ok && pm[b * P.ms[0] + h * P.ms[1] + P.qpos(i) * P.ms[2] + P.kpos(j) * P.ms[3]];
          if (P.has_seg()) ok = ok && P.qseg[b * n + i] == P.kseg[b * m + j];
          po[((b * Hm + h) * n + i) * m + j] = ok;
        }
  return out;
}

TileAttentionResult tile_attention_reference(const Tensor& q, const Tensor& k0, const Tensor& v0,
                                             const TilePattern& pattern, const TileOptions& opt) {
  check_qkv(q, k0, v0, "tile_attention_reference");
  check_options(opt, q.size(1), q.dtype(), "tile_attention_reference");
  const int64_t B = q.size(0), H = q.size(1), G = k0.size(1), N = q.size(2), M = k0.size(2);
  const double scale = scale_of(opt, q.size(3));
  auto qpos = [&](int64_t i) { return pattern.q_pos.empty() ? i : pattern.q_pos[i]; };
  auto kpos = [&](int64_t j) { return pattern.k_pos.empty() ? j : pattern.k_pos[j]; };
  Tensor k = k0, v = v0;
  if (G != H) {  // query head i reads key/value head i / (h/g): copies, the twin may
    std::vector<int64_t> kv(H);
    for (int64_t i = 0; i < H; ++i) kv[i] = i / (H / G);
    k = index_select(k0, 1, from_vector(kv));  // (B, h, M, dk)
    v = index_select(v0, 1, from_vector(kv));  // (B, h, M, dv)
  }
  Tensor allowed = tile_pattern_dense(pattern, N, M, B, H);           // (B|1, h|1, N, M)
  Tensor s = matmul(q, transpose(k, -2, -1)) * scale;                 // (B, h, N, M)
  if (!opt.alibi.empty()) {
    std::vector<double> bias(H * N * M);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < M; ++j) bias[(h * N + i) * M + j] = -opt.alibi[h] * std::abs(double(qpos(i) - kpos(j)));
    s = s + to(from_vector(bias, {1, H, N, M}), q.dtype());          // (B, h, N, M)
  }
  if (opt.softcap > 0) s = tanh(s / opt.softcap) * opt.softcap;
  // lse over the allowed entries; a row with none is -inf, with zero gradient (no NaN).
  Tensor row_any = zeros({allowed.size(0), allowed.size(1), N, 1}, kBool);  // (B|1, h|1, N, 1)
  {
    const bool* pa = allowed.data<bool>();
    bool* pr = row_any.data<bool>();
    for (int64_t row = 0; row < row_any.numel(); ++row) pr[row] = std::any_of(pa + row * M, pa + (row + 1) * M, [](bool a) { return a; });
  }
  Tensor masked = where(allowed, s, -INFINITY);                       // (B, h, N, M)
  TileAttentionResult r;
  Tensor p;
  if (opt.score == TileScore::Sigmoid) {
    p = where(allowed, sigmoid(s + opt.sigmoid_bias), 0.0);           // (B, h, N, M)
  } else if (opt.score == TileScore::Softpick) {
    // e = exp(s - c) - exp(-c), c = max(0, row max over allowed); P = relu(e) / (sum |e| + eps)
    Tensor c = clamp_min(amax(masked, {-1}, true), 0.0);                   // (B, h, N, 1)
    Tensor e = where(allowed, exp(masked - c) - exp(-c), 0.0);              // (B, h, N, M)
    p = relu(e) / (sum(abs(e), {-1}, true) + opt.softpick_eps);             // (B, h, N, M)
  } else if (opt.sinks.defined()) {
    // P = e^s / (e^sink + sum over allowed e^s), shifted by the detached max of both
    Tensor sink = reshape(opt.sinks, {1, H, 1, 1});                           // (1, h, 1, 1)
    Tensor shift = maximum(amax(masked, {-1}, true), sink).detach();         // (B, h, N, 1)
    Tensor e = where(allowed, exp(s - shift), 0.0);                          // (B, h, N, M)
    Tensor z = exp(sink - shift) + sum(e, {-1}, true);                       // (B, h, N, 1)
    p = e / z;
    r.lse = squeeze(shift + log(z), -1);                                     // (B, h, N)
  } else {
    p = softmax(s, -1, allowed);                                             // (B, h, N, M)
    Tensor safe = where(row_any, masked, 0.0);                               // (B, h, N, M)
    r.lse = where(squeeze(row_any, -1), logsumexp(safe, {-1}), -INFINITY);   // (B, h, N)
  }
  if (opt.dropout > 0) {
    std::vector<double> z(B * H * N * M);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < M; ++j)
            z[((b * H + h) * N + i) * M + j] =
                tile_dropout_keep(opt.seed, b, h, qpos(i), kpos(j), opt.dropout) ? 1.0 / (1.0 - opt.dropout) : 0.0;
    p = p * to(from_vector(z, {B, H, N, M}), q.dtype());
  }
  r.out = matmul(p, v);  // (B, h, N, dv)
  return r;
}

}  // namespace attnlab::nn

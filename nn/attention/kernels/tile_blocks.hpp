// The blocking the fused kernel's tile products share (tile_gemm_bf16.cpp, tile_gemm_f32.cpp):
// C (m, n) = alpha A (m, k) B (k, n) [+ C] in blocks of up to 6 rows x 64 columns, each one call
// of a register-blocked micro-kernel (24 zmm accumulators, 4 zmm of a B row, one broadcast A
// element per instruction: 29 of the 32 registers), with k in chunks of 64 so that a chunk of B
// stays in L1 while the row blocks pass over it. The element E is a float or a word of two bf16.
//
// Micro<MR, NV>::run(kc, alpha, A, sa_i, sa_p, B, ldb, accumulate, C, ldc, last_cols) computes
// C (MR, NV*16 columns, the last zmm holding last_cols of them) = alpha A B (+ C) for kc steps of
// k. It carries its own target attribute; this file holds no intrinsics, so it needs none.
#pragma once
#include <algorithm>
#include <cstdint>

namespace attnlab::nn::tile::blocks {

constexpr int kMR = 6;       // rows per block
constexpr int kNV = 4;       // zmm (16 columns each) per block
constexpr int64_t kKC = 64;  // steps of k per chunk

template <class E>
using MicroFn = void (*)(int64_t, float, const E*, int64_t, int64_t, const E*, int64_t, bool, float*, int64_t, int64_t);

template <class E, template <int, int> class Micro, int MR>
MicroFn<E> pick_nv(int nv) {
  switch (nv) {
    case 1: return Micro<MR, 1>::run;
    case 2: return Micro<MR, 2>::run;
    case 3: return Micro<MR, 3>::run;
    default: return Micro<MR, 4>::run;
  }
}

// The micro-kernel for a block of mr rows and nv zmm of columns.
template <class E, template <int, int> class Micro>
MicroFn<E> pick(int mr, int nv) {
  switch (mr) {
    case 1: return pick_nv<E, Micro, 1>(nv);
    case 2: return pick_nv<E, Micro, 2>(nv);
    case 3: return pick_nv<E, Micro, 3>(nv);
    case 4: return pick_nv<E, Micro, 4>(nv);
    case 5: return pick_nv<E, Micro, 5>(nv);
    default: return pick_nv<E, Micro, 6>(nv);
  }
}

// C (m, n; ldc) = alpha A B, or C += alpha A B when accumulate; k steps of the micro-kernel
// (floats, or words of two bf16). A (i, p) at A[i sa_i + p sa_p], B (p, j) at B[p ldb + j].
template <class E, template <int, int> class Micro>
void gemm(int64_t m, int64_t n, int64_t k, float alpha, const E* A, int64_t sa_i, int64_t sa_p, const E* B,
          int64_t ldb, bool accumulate, float* C, int64_t ldc) {
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(C + i * ldc, C + i * ldc + n, 0.0f);
    return;
  }
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    const bool acc = accumulate || p0 > 0;
    for (int64_t j0 = 0; j0 < n; j0 += 16 * kNV) {
      const int64_t w = std::min<int64_t>(16 * kNV, n - j0), nv = (w + 15) / 16;
      for (int64_t i0 = 0; i0 < m; i0 += kMR) {
        const int64_t mr = std::min<int64_t>(kMR, m - i0);
        pick<E, Micro>(int(mr), int(nv))(kc, alpha, A + i0 * sa_i + p0 * sa_p, sa_i, sa_p, B + p0 * ldb + j0, ldb,
                                         acc, C + i0 * ldc + j0, ldc, w - 16 * (nv - 1));
      }
    }
  }
}

}  // namespace attnlab::nn::tile::blocks

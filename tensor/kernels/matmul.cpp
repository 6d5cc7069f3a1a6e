// Batched matrix products on OpenBLAS; float32 products of the shapes and machines where oneDNN
// is faster go to oneDNN instead (tensor/matmul_route.hpp, matmul_onednn.cpp). Batch dims
// broadcast like NumPy. Each operand's last two dims are passed to BLAS as they lie in memory
// (row-major, or transposed via the trans flag), so transposed views cost no copy. When the
// right operand is the same matrix for every batch element and the left one is contiguous
// across the batch, the batch folds into the rows and the product is one large gemm (the common
// case of a linear layer).
//
// Threads: OpenBLAS runs single-threaded (see parallel.hpp); attnlab splits the output into
// (batch, row block) or (batch, column block) tasks on its TBB arena, so each thread writes its
// own part of C.
#include <cblas.h>

#include <cstring>

#include "tensor/kernels.hpp"
#include "tensor/kernels/matmul_onednn.hpp"
#include "tensor/kernels/matmul_shape.hpp"
#include "tensor/kernels/rows.hpp"
#include "tensor/matmul_route.hpp"
#include "tensor/parallel.hpp"

namespace attnlab::kernels {
namespace {

struct MatLayout {
  bool trans = false;  // stored column-major (a transposed view)
  int64_t ld = 0;
};

// How BLAS can read a rows x cols matrix with strides (s0, s1), or nullopt if it cannot.
bool blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, MatLayout* out) {
  if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= std::max<int64_t>(cols, 1))) {
    *out = {false, rows == 1 ? std::max<int64_t>(cols, 1) : s0};
    return true;
  }
  if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= std::max<int64_t>(rows, 1))) {
    *out = {true, cols == 1 ? std::max<int64_t>(rows, 1) : s1};
    return true;
  }
  return false;
}

// C = A @ B. C is zeroed here and BLAS accumulates into it (beta = 1): OpenBLAS's own beta = 0
// pass over C is several times slower than memset, which shows when K is small and C large
// (a weight gradient x^T @ g with K = batch: 15-20% of the whole product). Same arithmetic.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
          int64_t ldc) {
  for (int64_t r = 0; r < M; ++r) std::memset(C + r * ldc, 0, N * sizeof(T));
  auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, tA, tB, M, N, K, 1.0, A, lda, B, ldb, 1.0, C, ldc);
}

}  // namespace

MatmulShape matmul_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dim() < 2 || b.dim() < 2)
    fail<ShapeError>("{}: kernel needs at least 2-d operands, got {} and {}", op, to_string(a.shape()),
                     to_string(b.shape()));
  if (a.dtype() != b.dtype())
    fail<DTypeError>("{}: dtypes differ: {} {} and {} {}", op, dtype_name(a.dtype()), to_string(a.shape()),
                     dtype_name(b.dtype()), to_string(b.shape()));
  MatmulShape s;
  s.n = a.shape()[a.dim() - 2], s.k = a.shape().back(), s.m = b.shape().back();
  if (b.shape()[b.dim() - 2] != s.k)
    fail<ShapeError>("{}: cannot multiply {} by {}: inner sizes {} and {} differ", op, to_string(a.shape()),
                     to_string(b.shape()), s.k, b.shape()[b.dim() - 2]);
  for (int i = 0; i < a.dim() - 2; ++i) s.abatch.push_back(a.shape()[i]);
  for (int i = 0; i < b.dim() - 2; ++i) s.bbatch.push_back(b.shape()[i]);
  s.batch = broadcast_shapes(s.abatch, s.bbatch, op);
  s.out = s.batch;
  s.out.push_back(s.n);
  s.out.push_back(s.m);
  return s;
}

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  if (a0.dtype() == kBFloat16 && b0.dtype() == kBFloat16) return matmul_bf16(a0, b0);
  const MatmulShape s = matmul_shape(a0, b0, "matmul");
  const int64_t n = s.n, k = s.k, m = s.m;
  const Dims &abatch = s.abatch, &bbatch = s.bbatch, &batch = s.batch, &out_shape = s.out;
  Tensor out = Tensor::empty(out_shape, a0.dtype());
  const int64_t nbatch = numel_of(batch);
  if (out.numel() == 0) return out;
  if (k == 0) {
    fill_(out, 0);
    return out;
  }
  // float32 products of the shapes and machines where oneDNN is faster (tensor/matmul_route.hpp).
  if (a0.dtype() == kFloat32 && float32_matmul_on_onednn(nbatch, n, m, k)) {
    onednn_matmul(a0, b0, s, out);
    return out;
  }

  Tensor a = a0, b = b0;
  MatLayout la, lb;
  if (!blas_layout(n, k, a.strides()[a.dim() - 2], a.strides().back(), &la)) {
    a = contiguous(a);
    la = {false, k};
  }
  if (!blas_layout(k, m, b.strides()[b.dim() - 2], b.strides().back(), &lb)) {
    b = contiguous(b);
    lb = {false, m};
  }
  // Batch strides (0 where an operand is broadcast).
  Dims ast = broadcast_strides(abatch, Dims(std::vector<int64_t>(a.strides().begin(), a.strides().end() - 2)), batch);
  Dims bst = broadcast_strides(bbatch, Dims(std::vector<int64_t>(b.strides().begin(), b.strides().end() - 2)), batch);

  // Fold the batch into rows: b shared by every batch element, a row-major and evenly spaced.
  int64_t rows = n, batches = nbatch;
  bool b_shared = true;
  for (int64_t s : bst) b_shared &= s == 0;
  if (nbatch > 1 && b_shared && !la.trans) {
    bool even = true;
    int64_t expect = n * la.ld;
    for (int i = batch.size() - 1; i >= 0; --i) {
      if (batch[i] == 1) continue;
      even &= ast[i] == expect;
      expect *= batch[i];
    }
    if (even) {
      rows = n * nbatch;
      batches = 1;
    }
  }

  dispatch_floating(a.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.template data<T>();
    const T* pb = b.template data<T>();
    T* pc = out.template data<T>();
    // Split the output so that there are at least as many tasks as threads, but keep blocks
    // large. Each task's gemm packs its slice of A and its slice of B: split rows, unless C has
    // more columns than rows (a linear layer on a small batch), then split columns, so that no
    // thread packs all of the larger operand B. Column blocks are whole cache lines wide.
    const int nt = num_threads();
    const double flops = 2.0 * double(batches) * rows * m * k;
    constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line
    int64_t row_blocks = 1, col_blocks = 1;
    if (nt > 1 && flops > 2e5 && batches < nt) {
      const int64_t want = (nt + batches - 1) / batches;
      if (m > rows)
        col_blocks = std::min<int64_t>((m + kLine - 1) / kLine, want);
      else
        row_blocks = std::min<int64_t>(rows, want);
    }
    const int64_t rb = (rows + row_blocks - 1) / row_blocks;
    const int64_t cb = col_blocks == 1 ? m : ((m + col_blocks - 1) / col_blocks + kLine - 1) / kLine * kLine;
    const int64_t per_batch = row_blocks * col_blocks;
    auto task = [&](int64_t t) {
      const int64_t bi = t / per_batch, blk = t % per_batch;
      const int64_t r0 = (blk / col_blocks) * rb, r1 = std::min(rows, r0 + rb);
      const int64_t c0 = (blk % col_blocks) * cb, c1 = std::min(m, c0 + cb);
      if (r0 >= r1 || c0 >= c1) return;
      int64_t aoff = row_offset(bi, batch, ast, batch.size()), boff = row_offset(bi, batch, bst, batch.size());
      const T* A = pa + aoff + (la.trans ? r0 : r0 * la.ld);
      const T* B = pb + boff + (lb.trans ? c0 * lb.ld : c0);
      gemm<T>(la.trans, lb.trans, r1 - r0, c1 - c0, k, A, la.ld, B, lb.ld, pc + (bi * rows + r0) * m + c0, m);
    };
    const int64_t tasks = batches * per_batch;
    if (nt <= 1 || flops <= 2e5 || tasks == 1) {
      for (int64_t t = 0; t < tasks; ++t) task(t);
    } else {
      parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) task(t);
      });
    }
  });
  return out;
}

}  // namespace attnlab::kernels

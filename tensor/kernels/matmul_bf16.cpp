// bfloat16 matrix products with float32 results: a (..., n, k) @ b (..., k, m), both bfloat16,
// accumulated in float32 (the mixed-precision product of autocast, autograd/autocast.hpp).
//
// With oneDNN (ATTNLAB_WITH_DNNL) the product is oneDNN's matmul primitive (matmul_onednn.cpp).
// On a CPU with AVX512_BF16 or AMX it dispatches to a kernel that multiplies bf16 pairs in
// hardware ("brg:avx512_core_bf16", "brg:avx512_core_amx"); elsewhere oneDNN converts to float32
// first, which is slower than float32 itself (docs/performance.md, section 11).
//
// Without oneDNN the product is its naive twin: both operands converted to float32 (exact) and
// multiplied by OpenBLAS. The two differ only in the order of float32 sums.
#include "tensor/kernels.hpp"
#include "tensor/kernels/matmul_onednn.hpp"

namespace attnlab::kernels {

Tensor matmul_bf16(const Tensor& a, const Tensor& b) {
  const MatmulShape s = matmul_shape(a, b, "matmul_bf16");
  if (a.dtype() != kBFloat16)
    fail<DTypeError>("matmul_bf16: expected bfloat16 operands, got {} {} and {} {}", dtype_name(a.dtype()),
                     to_string(a.shape()), dtype_name(b.dtype()), to_string(b.shape()));
#ifdef ATTNLAB_WITH_DNNL
  Tensor out = Tensor::empty(s.out, kFloat32);
  if (out.numel() == 0) return out;
  if (s.k == 0) {
    fill_(out, 0);
    return out;
  }
  onednn_matmul(a, b, s, out);
  return out;
#else
  (void)s;
  return matmul(to_dtype(a, kFloat32), to_dtype(b, kFloat32));
#endif
}

}  // namespace attnlab::kernels

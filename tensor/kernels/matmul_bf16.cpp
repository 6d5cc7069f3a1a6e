// bfloat16 matrix products with float32 results: a (..., n, k) @ b (..., k, m), both bfloat16,
// accumulated in float32 (the mixed-precision product of autocast, autograd/autocast.hpp).
//
// With oneDNN (ATTNLAB_WITH_DNNL) the product is oneDNN's matmul primitive. On a CPU with
// AVX512_BF16 or AMX it dispatches to a kernel that multiplies bf16 pairs in hardware
// ("brg:avx512_core_bf16", "brg:avx512_core_amx"); elsewhere oneDNN converts to float32 first,
// which is slower than float32 itself (docs/performance.md, section 11). Operands are passed
// with their strides, so transposed views cost no copy; a batch that cannot be described by
// one stride per dim is copied. Threads: the output's rows are split into num_threads() blocks,
// one TBB task each, and each task calls oneDNN on a single OpenMP thread (Debian's oneDNN
// threads with OpenMP), as the float32 products call OpenBLAS single-threaded.
//
// Without oneDNN the product is its naive twin: both operands converted to float32 (exact) and
// multiplied by OpenBLAS. The two differ only in the order of float32 sums.
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>
#include <set>

#include "tensor/bf16_info.hpp"
#include "tensor/kernels.hpp"
#include "tensor/kernels/matmul_shape.hpp"
#include "tensor/parallel.hpp"

#ifdef ATTNLAB_WITH_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace attnlab {
namespace {

std::mutex& kernels_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& kernels_seen() {
  static std::set<std::string> s;
  return s;
}

}  // namespace

std::vector<std::string> onednn_kernels_used() {
  std::lock_guard<std::mutex> lock(kernels_mutex());
  return {kernels_seen().begin(), kernels_seen().end()};
}

}  // namespace attnlab

namespace attnlab::kernels {
namespace {

#ifdef ATTNLAB_WITH_DNNL

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// x's dims (..., r, c) as oneDNN dims and strides with every batch dim kept: a batch dim of
// size 1 gets a stride that describes it densely (oneDNN wants no zero strides).
void describe(const Tensor& x, const Dims& batch, dnnl::memory::dims* dims, dnnl::memory::dims* strides) {
  const int nb = batch.size(), lead = int(batch.size()) - (x.dim() - 2);
  dims->assign(nb + 2, 1);
  strides->assign(nb + 2, 0);
  for (int i = 0; i < nb; ++i) (*dims)[i] = batch[i];
  (*dims)[nb] = x.shape()[x.dim() - 2];
  (*dims)[nb + 1] = x.shape().back();
  (*strides)[nb] = x.strides()[x.dim() - 2];
  (*strides)[nb + 1] = x.strides().back();
  int64_t dense = 1;  // a stride past every element for size-1 (broadcast) dims
  for (int d = 0; d < x.dim(); ++d) dense = std::max(dense, x.strides()[d] * x.shape()[d]);
  for (int i = nb - 1; i >= 0; --i) {
    const int d = i - lead;
    (*strides)[i] = d < 0 || x.shape()[d] == 1 ? dense : x.strides()[d];
  }
}

// Whether oneDNN can read x in place: its last two dims have one unit stride and no zero one,
// and its batch dims are the product's (not broadcast), or the batch has one element.
bool readable(const Tensor& x, const Dims& batch) {
  const int64_t s0 = x.strides()[x.dim() - 2], s1 = x.strides().back();
  if ((s0 != 1 && s1 != 1) || s0 == 0 || s1 == 0) return false;
  if (numel_of(batch) == 1) return true;
  if (x.dim() - 2 != int(batch.size())) return false;
  for (int d = 0; d < x.dim() - 2; ++d)
    if (x.shape()[d] != batch[d] || x.strides()[d] == 0) return false;
  return true;
}

// A contiguous copy of x broadcast to `shape`.
Tensor dense(const Tensor& x, const Dims& shape) {
  Tensor out = Tensor::empty(shape, x.dtype());
  copy_(out, x);
  return out;
}

// The product of rows [r0, r1) of a (its second-to-last dim) with b, into the same rows of a
// dense float32 output of the full problem's dims: a slice keeps every stride.
struct Product {
  dnnl::memory::dims ad, as, bd, bs, cd, cs;
  int rdim = 0;  // index of the row dim

  Product(const Tensor& a, const Tensor& b, const Dims& batch, int64_t m) {
    describe(a, batch, &ad, &as);
    describe(b, batch, &bd, &bs);
    rdim = int(ad.size()) - 2;
    cd = ad;
    cd.back() = m;
    cs.assign(cd.size(), 1);
    for (int i = int(cd.size()) - 2; i >= 0; --i) cs[i] = cs[i + 1] * cd[i + 1];
  }
  int64_t rows() const { return ad[rdim]; }
  dnnl::matmul::primitive_desc describe_rows(int64_t r0, int64_t r1) const {
    using dt = dnnl::memory::data_type;
    dnnl::memory::dims ad2 = ad, cd2 = cd;
    ad2[rdim] = cd2[rdim] = r1 - r0;
    dnnl::memory::desc amd(ad2, dt::bf16, as), bmd(bd, dt::bf16, bs), cmd(cd2, dt::f32, cs);
    dnnl::primitive_attr attr;  // the scratchpad comes from the caller (scratchpad_for)
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, cmd), attr, engine());  // the oneDNN 2.x API
  }
};

// This thread's scratchpad for a primitive that asks for `bytes` (the brgemm kernels pack their
// operands into it): one buffer per thread, grown to the largest request and kept. Left to
// oneDNN, a scratchpad is allocated per execution, and a fresh large allocation is fresh pages
// the kernel faults in and zeroes on every product.
void* scratchpad_for(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (bytes > buf.size) {
    std::free(buf.p);
    buf.size = (bytes + 4095) & ~size_t{4095};
    buf.p = std::aligned_alloc(64, buf.size);
    if (!buf.p) {
      buf.size = 0;
      throw std::bad_alloc();
    }
  }
  return buf.p;
}

void onednn_matmul(Tensor a, Tensor b, const MatmulShape& s, const Tensor& out) {
  Dims batch = s.batch;
  Dims shape_a = batch, shape_b = batch;
  shape_a.push_back(s.n), shape_a.push_back(s.k);
  shape_b.push_back(s.k), shape_b.push_back(s.m);
  // b shared by the whole batch and a contiguous: one 2-d product with the batch in the rows.
  const bool fold = numel_of(s.bbatch) == 1 && a.is_contiguous() && batch.size() > 0;
  if (fold) {
    a = a.as_strided(Dims{numel_of(batch) * s.n, s.k}, Dims{s.k, 1}, a.offset());
    b = b.as_strided(Dims{s.k, s.m}, Dims{b.strides()[b.dim() - 2], b.strides().back()}, b.offset());
    if (!readable(b, Dims{})) b = dense(b, b.shape());
    batch = Dims{};
  } else {
    if (!readable(a, batch)) a = dense(a, shape_a);
    if (!readable(b, batch)) b = dense(b, shape_b);
  }
  std::optional<Product> p;
  try {
    p.emplace(a, b, batch, s.m);
    p->describe_rows(0, p->rows());
  } catch (const dnnl::error&) {  // a stride pattern oneDNN declines: dense copies always work
    a = dense(a, fold ? a.shape() : shape_a);
    b = dense(b, fold ? b.shape() : shape_b);
    p.emplace(a, b, batch, s.m);
  }
  // Row blocks, one task each on attnlab's TBB arena, every oneDNN call on one OpenMP thread: the
  // threading of the OpenBLAS products (tensor/parallel.hpp). An OpenMP team instead would spin
  // at its barriers against the TBB workers of the ops before and after it.
  const int64_t R = p->rows();
  const int nt = num_threads();
  const double flops = 2.0 * double(numel_of(batch)) * double(R) * double(s.m) * double(s.k);
  const int64_t blocks = nt > 1 && flops > 2e5 ? std::min<int64_t>(R, nt) : 1;
  const int64_t rb = (R + blocks - 1) / blocks;
  auto run = [&](int64_t blk) {
    const int64_t r0 = blk * rb, r1 = std::min(R, r0 + rb);
    if (r0 >= r1) return;
    const dnnl::matmul::primitive_desc pd = p->describe_rows(r0, r1);
    if (blk == 0) {
      const std::string impl = pd.impl_info_str();
      std::lock_guard<std::mutex> lock(kernels_mutex());
      kernels_seen().insert(impl);
    }
    auto* pa = static_cast<bfloat16*>(a.raw_data()) + r0 * p->as[p->rdim];
    auto* pc = static_cast<float*>(out.raw_data()) + r0 * p->cs[p->rdim];
    dnnl::memory am(pd.src_desc(), engine(), pa), bm(pd.weights_desc(), engine(), b.raw_data());
    dnnl::memory cm(pd.dst_desc(), engine(), pc);
    const dnnl::memory::desc spd = pd.scratchpad_desc();
    dnnl::memory spm(spd, engine(), scratchpad_for(spd.get_size()));
    dnnl::stream st(engine());
    omp_set_num_threads(1);
    dnnl::matmul(pd).execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, spm}});
    st.wait();
  };
  if (blocks == 1) {
    run(0);
  } else {
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) run(blk);
    });
  }
}

#endif

}  // namespace

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

// oneDNN's matmul primitive for a (..., n, k) @ b (..., k, m), bfloat16 or float32 operands,
// float32 result: the bf16 products of autocast (matmul_bf16.cpp) and the float32 products the
// route sends to oneDNN (tensor/matmul_route.hpp; docs/performance.md, section 11).
//
// Operands are passed with their strides, so transposed views cost no copy; a batch that cannot
// be described by one stride per dim is copied. Threads: the output is split into num_threads()
// row blocks (column blocks when it has more columns than rows, as the OpenBLAS products do, so
// that no thread packs all of a wide right operand), one TBB task each, and each task calls
// oneDNN on a single OpenMP thread (Debian's oneDNN threads with OpenMP): an OpenMP team would
// spin at its barriers against the TBB workers of the ops before and after it.
//
// Primitives are cached, keyed by everything their description holds (dtype, dims and strides
// of the block's three operands), so a steady training step builds none. A cached primitive may
// run on any thread, and on two at once: it is built with a user-managed scratchpad, and each
// thread passes its own (oneDNN's library-managed scratchpad ties a primitive to its thread).
#include "tensor/kernels/matmul_onednn.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "tensor/bf16_info.hpp"
#include "tensor/kernels.hpp"
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

using dims_t = dnnl::memory::dims;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// x's dims (..., r, c) as oneDNN dims and strides with every batch dim kept: a batch dim of
// size 1 gets a stride that describes it densely (oneDNN wants no zero strides).
void describe(const Tensor& x, const Dims& batch, dims_t* dims, dims_t* strides) {
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

// A built primitive and what running it needs.
struct Built {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
  std::string impl;
};

// The cache: the flattened description (dtype, then dims and strides of a, b, c) -> primitive.
std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::vector<int64_t>, std::shared_ptr<const Built>>& cache() {
  static std::map<std::vector<int64_t>, std::shared_ptr<const Built>> c;
  return c;
}

// The product of block [r0, r1) x [c0, c1) of the output: the same strides as the full
// problem, the row dim of a and c and the column dim of b and c cut to the block.
struct Product {
  dims_t ad, as, bd, bs, cd, cs;
  dnnl::memory::data_type in;
  int rdim = 0;  // index of the row dim

  Product(const Tensor& a, const Tensor& b, const Dims& batch, int64_t m) {
    describe(a, batch, &ad, &as);
    describe(b, batch, &bd, &bs);
    in = a.dtype() == kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    rdim = int(ad.size()) - 2;
    cd = ad;
    cd.back() = m;
    cs.assign(cd.size(), 1);
    for (int i = int(cd.size()) - 2; i >= 0; --i) cs[i] = cs[i + 1] * cd[i + 1];
  }
  std::shared_ptr<const Built> block(int64_t r0, int64_t r1, int64_t c0, int64_t c1) const {
    dims_t ad2 = ad, bd2 = bd, cd2 = cd;
    ad2[rdim] = cd2[rdim] = r1 - r0;
    bd2.back() = cd2.back() = c1 - c0;
    std::vector<int64_t> key{int64_t(in), int64_t(ad.size())};
    for (const dims_t* v : std::initializer_list<const dims_t*>{&ad2, &as, &bd2, &bs, &cd2, &cs})
      key.insert(key.end(), v->begin(), v->end());
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto& c = cache();
    if (auto it = c.find(key); it != c.end()) return it->second;
    using dt = dnnl::memory::data_type;
    dnnl::memory::desc amd(ad2, in, as), bmd(bd2, in, bs), cmd(cd2, dt::f32, cs);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto built = std::make_shared<Built>();
    built->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(amd, bmd, cmd), attr, engine());  // the 2.x API
    built->prim = dnnl::matmul(built->pd);
    built->scratch_bytes = built->pd.scratchpad_desc().get_size();
    built->impl = built->pd.impl_info_str();
    if (int64_t(c.size()) >= kOnednnCacheCapacity) c.clear();  // in-flight users hold their shared_ptr
    c.emplace(std::move(key), built);
    return built;
  }
};

// This thread's scratchpad, grown to the largest a primitive has asked for on it.
void* scratchpad(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (bytes > buf.size) {
    std::free(buf.p);
    buf.size = (bytes + 4095) / 4096 * 4096;
    buf.p = std::aligned_alloc(64, buf.size);
    if (!buf.p) throw std::bad_alloc();
  }
  return buf.p;
}

void run_onednn(Tensor a, Tensor b, const MatmulShape& s, const Tensor& out) {
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
  // Blocks as the OpenBLAS products split (matmul.cpp): rows, unless C has more columns than
  // rows; column blocks are whole cache lines (16 floats) wide.
  const int64_t R = fold ? a.shape()[0] : s.n, M = s.m;
  const int nt = num_threads();
  const double flops = 2.0 * double(numel_of(batch)) * double(R) * double(M) * double(s.k);
  int64_t row_blocks = 1, col_blocks = 1;
  if (nt > 1 && flops > 2e5) {
    if (M > R)
      col_blocks = std::min<int64_t>((M + 15) / 16, nt);
    else
      row_blocks = std::min<int64_t>(R, nt);
  }
  const int64_t rb = (R + row_blocks - 1) / row_blocks;
  const int64_t cb = col_blocks == 1 ? M : ((M + col_blocks - 1) / col_blocks + 15) / 16 * 16;
  std::optional<Product> p;
  try {
    p.emplace(a, b, batch, s.m);
    p->block(0, std::min(R, rb), 0, std::min(M, cb));
  } catch (const dnnl::error&) {  // a stride pattern oneDNN declines: dense copies always work
    a = dense(a, fold ? a.shape() : shape_a);
    b = dense(b, fold ? b.shape() : shape_b);
    p.emplace(a, b, batch, s.m);
  }
  const size_t esize = a.dtype() == kBFloat16 ? 2 : 4;
  auto run = [&](int64_t blk) {
    const int64_t r0 = (blk / col_blocks) * rb, r1 = std::min(R, r0 + rb);
    const int64_t c0 = (blk % col_blocks) * cb, c1 = std::min(M, c0 + cb);
    if (r0 >= r1 || c0 >= c1) return;
    const std::shared_ptr<const Built> built = p->block(r0, r1, c0, c1);
    if (blk == 0 && a.dtype() == kBFloat16) {
      std::lock_guard<std::mutex> lock(kernels_mutex());
      kernels_seen().insert(built->impl);
    }
    auto* pa = static_cast<char*>(a.raw_data()) + r0 * p->as[p->rdim] * esize;
    auto* pb = static_cast<char*>(b.raw_data()) + c0 * p->bs.back() * esize;
    auto* pc = static_cast<float*>(out.raw_data()) + r0 * p->cs[p->rdim] + c0;
    const dnnl::matmul::primitive_desc& pd = built->pd;
    dnnl::memory am(pd.src_desc(), engine(), pa), bm(pd.weights_desc(), engine(), pb);
    dnnl::memory cm(pd.dst_desc(), engine(), pc);
    dnnl::memory sm(pd.scratchpad_desc(), engine(), scratchpad(built->scratch_bytes));
    thread_local dnnl::stream st(engine());
    omp_set_num_threads(1);
    built->prim.execute(st,
                        {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
    st.wait();
  };
  const int64_t blocks = row_blocks * col_blocks;
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

void onednn_matmul(const Tensor& a, const Tensor& b, const MatmulShape& s, const Tensor& out) {
#ifdef ATTNLAB_WITH_DNNL
  run_onednn(a, b, s, out);
#else
  (void)a, (void)b, (void)s, (void)out;
  fail<ValueError>("matmul on oneDNN: this attnlab was built without oneDNN ({})", onednn_description());
#endif
}

int64_t onednn_cached_primitives() {
#ifdef ATTNLAB_WITH_DNNL
  std::lock_guard<std::mutex> lock(cache_mutex());
  return int64_t(cache().size());
#else
  return 0;
#endif
}

}  // namespace attnlab::kernels

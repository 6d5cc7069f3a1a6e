// bench_bf16_matmul: is bf16 mixed precision a speed-up on this CPU? The same products
// C (M, N) = A (M, K) B (K, N) in three forms, alternating in one run:
//   sgemm      OpenBLAS cblas_sgemm, float32 (what attnlab's matmul calls)
//   dnnl f32   oneDNN's matmul primitive, float32
//   dnnl bf16  oneDNN's matmul primitive, bf16 A and B, float32 C (the autocast form)
// and prints GFLOP/s (2 M N K / time) with the bf16 / f32 ratios, and which kernel oneDNN
// dispatched to (its implementation name: "avx512_core_bf16" uses the vdpbf16ps instruction,
// plain "avx512_core" converts bf16 to float32 and multiplies in float32).
//
//   build/bench/bench_bf16_matmul [--threads T] [--reps R]
//
// With --routes it times attnlab's own float32 product (kernels::matmul: TBB row blocks, one
// single-threaded library call each, transposed views read in place) on the products of the
// reference LM's and GPT-2 small's training steps, forced to OpenBLAS and to oneDNN in turn
// (set_matmul_route), and prints which one the `auto` route picks (tensor/matmul_route.hpp).
//
// oneDNN (Debian libdnnl-dev) is needed for this program only; CMake builds it when oneDNN is
// found. docs/performance.md, "bf16", has the figures and the decision they led to.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "tensor/creation.hpp"
#include "tensor/kernels.hpp"
#include "tensor/matmul_route.hpp"
#include "tensor/parallel.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// float32 -> bf16 by round-to-nearest-even on the upper 16 bits.
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

struct Shape {
  int64_t m, n, k;
  const char* what;
};

// One oneDNN matmul (A, B of `type`, C float32) with its memory, ready to execute.
struct DnnlMatmul {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;

  DnnlMatmul(dnnl::engine& eng, const Shape& s, dnnl::memory::data_type type, const std::vector<float>& av,
             const std::vector<float>& bv) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory::desc ad({s.m, s.k}, type, tag::ab), bd({s.k, s.n}, type, tag::ab), cd({s.m, s.n}, dt::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), eng);  // the oneDNN 2.x API
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    a = dnnl::memory(ad, eng);
    b = dnnl::memory(bd, eng);
    c = dnnl::memory(cd, eng);
    fill(a, av, type);
    fill(b, bv, type);
  }

  static void fill(dnnl::memory& m, const std::vector<float>& v, dnnl::memory::data_type type) {
    if (type == dnnl::memory::data_type::f32) {
      std::memcpy(m.get_data_handle(), v.data(), v.size() * 4);
    } else {
      auto* p = static_cast<uint16_t*>(m.get_data_handle());
      for (size_t i = 0; i < v.size(); ++i) p[i] = to_bf16(v[i]);
    }
  }

  void run(dnnl::stream& st) {
    prim.execute(st, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    st.wait();
  }
};

template <class F>
double seconds_of(F&& f, int64_t reps) {
  f();  // warm-up
  const auto t0 = Clock::now();
  for (int64_t r = 0; r < reps; ++r) f();
  return std::chrono::duration<double>(Clock::now() - t0).count() / double(reps);
}

// A product of the LM steps: (m, k) @ (k, n), each operand stored transposed when its flag says so
// (a linear layer's x @ W^T reads W transposed; its weight gradient g^T @ x reads g transposed).
struct StepProduct {
  int64_t m, n, k;
  bool ta, tb;
  const char* what;
};

// attnlab's matmul under each forced route, alternating, then the route `auto` picks.
int run_routes(int64_t threads, int64_t reps) {
  using namespace attnlab;
  set_num_threads(int(threads));
  const std::vector<StepProduct> products = {
      // reference LM: 8 x 256 tokens, D = 256, FFN 1024, vocabulary 256
      {2048, 256, 256, false, true, "ref: x W^T, D -> D"},
      {2048, 1024, 256, false, true, "ref: FFN up x W^T"},
      {2048, 256, 1024, false, true, "ref: FFN down x W^T"},
      {2048, 256, 256, false, false, "ref: dx = g W"},
      {2048, 256, 1024, false, false, "ref: FFN up dx = g W"},
      {256, 256, 2048, true, false, "ref: dW = g^T x"},
      {1024, 256, 2048, true, false, "ref: FFN up dW = g^T x"},
      {256, 1024, 2048, true, false, "ref: FFN down dW"},
      // GPT-2 small: 4 x 64 tokens, D = 768, vocabulary 50257
      {256, 2304, 768, false, true, "gpt2: qkv x W^T"},
      {256, 768, 768, false, true, "gpt2: attn proj x W^T"},
      {256, 3072, 768, false, true, "gpt2: fc x W^T"},
      {256, 768, 3072, false, true, "gpt2: fc proj x W^T"},
      {256, 50257, 768, false, true, "gpt2: head x E^T"},
      {256, 768, 50257, false, false, "gpt2: head dx = g E"},
      {50257, 768, 256, true, false, "gpt2: head dE = g^T x"},
      {2304, 768, 256, true, false, "gpt2: qkv dW = g^T x"},
      {768, 3072, 256, true, false, "gpt2: fc proj dW"},
      // small products (per-head or small-batch shapes)
      {64, 64, 64, false, false, "small 64^3"},
      {128, 64, 64, false, false, "small 128x64x64"},
      {128, 128, 64, false, false, "small 128x128x64"},
      {128, 128, 64, false, true, "small 128x128x64, B^T"},
      {128, 128, 128, false, false, "small 128^3"},
      {256, 256, 32, false, true, "scores 256x256, dk 32"},
      // medium products, between the small ones and the LM steps'
      {256, 128, 128, false, false, "medium 256x128x128"},
      {256, 256, 128, false, true, "medium 256x256x128, B^T"},
      {256, 256, 256, false, false, "medium 256^3"},
      {512, 512, 64, false, true, "scores 512x512, dk 64"},
      {512, 256, 256, false, true, "medium 512x256x256, B^T"},
      {512, 512, 256, false, false, "medium 512x512x256"},
  };
  std::printf("attnlab matmul, float32, %d threads, reps %lld (routes alternate; median of 3 rounds)\n", num_threads(),
              (long long)reps);
  std::printf("auto here: %s\n", matmul_route_description().c_str());
  std::printf("%-30s %-22s %9s %9s %9s %9s  %s\n", "product", "(M, N, K) tA tB", "MFLOP", "openblas", "onednn",
              "dnn/blas", "auto");
  Generator g(7);
  for (const StepProduct& p : products) {
    // (r, c), stored transposed (a column-major view of a (c, r) matrix) when `t`.
    auto operand = [&](int64_t r, int64_t c, bool t) {
      return t ? randn({c, r}, g).as_strided(Dims{r, c}, Dims{1, r}, 0) : randn({r, c}, g);
    };
    Tensor a = operand(p.m, p.k, p.ta), b = operand(p.k, p.n, p.tb);
    const double flop = 2.0 * double(p.m) * double(p.n) * double(p.k);
    const int64_t r = std::max<int64_t>(1, std::min<int64_t>(reps * 20, int64_t(2e10 / flop)));
    std::vector<double> t_blas, t_dnn;
    for (int round = 0; round < 3; ++round) {
      for (MatmulRoute route : {MatmulRoute::OpenBLAS, MatmulRoute::OneDNN}) {
        MatmulRouteGuard guard(route);
        (route == MatmulRoute::OpenBLAS ? t_blas : t_dnn)
            .push_back(seconds_of([&] { (void)kernels::matmul(a, b); }, r));
      }
    }
    using attnlab::bench::median;
    const double gb = flop / median(t_blas) * 1e-9, gd = flop / median(t_dnn) * 1e-9;
    char dims[64];
    std::snprintf(dims, sizeof dims, "(%lld, %lld, %lld) %c %c", (long long)p.m, (long long)p.n, (long long)p.k,
                  p.ta ? 'T' : '-', p.tb ? 'T' : '-');
    MatmulRouteGuard automatic(MatmulRoute::Auto);
    std::printf("%-30s %-22s %9.1f %9.1f %9.1f %8.2fx  %s\n", p.what, dims, flop * 1e-6, gb, gd, gd / gb,
                float32_matmul_on_onednn(1, p.m, p.n, p.k) ? "onednn" : "openblas");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t threads = 2, reps = 5;
  CLI::App app("bench_bf16_matmul: oneDNN bf16 matrix products against OpenBLAS sgemm");
  app.add_option("--threads", threads, "threads of both libraries")->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "repetitions (the median is reported)")->check(CLI::Range(1, 100000));
  bool routes = false;
  app.add_flag("--routes", routes,
               "attnlab's float32 matmul on the LM steps' products, routed to OpenBLAS and to oneDNN (GFLOP/s)");
  attnlab::bench::parse_or_exit(app, argc, argv);
  if (routes) return run_routes(threads, reps);
  openblas_set_num_threads(int(threads));
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);

  const std::vector<Shape> shapes = {
      {1024, 1024, 1024, "square 1K"},
      {2048, 2048, 2048, "square 2K"},
      {4096, 256, 256, "LM projection: 32x128 tokens, D = 256"},
      {4096, 1024, 256, "LM FFN up: 32x128 tokens, 256 -> 1024"},
      {4096, 4096, 64, "attention scores: N = 4K, dk = 64"},
  };
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  std::printf("threads %lld, reps %lld (each form alternates with the others; median of 3 rounds)\n", (long long)threads,
              (long long)reps);
  std::printf("%-42s %10s %10s %10s %10s %10s  %s\n", "shape (M, N, K)", "sgemm", "dnnl f32", "dnnl bf16",
              "bf16/f32", "bf16/sgemm", "oneDNN bf16 kernel");
  for (const Shape& s : shapes) {
    std::vector<float> av(size_t(s.m * s.k)), bv(size_t(s.k * s.n)), cv(size_t(s.m * s.n));
    uint32_t x = 12345;
    for (auto* v : {&av, &bv})
      for (float& f : *v) f = float((x = x * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f;
    DnnlMatmul f32(eng, s, dnnl::memory::data_type::f32, av, bv), bf16(eng, s, dnnl::memory::data_type::bf16, av, bv);
    std::vector<double> t_s, t_f, t_b;
    for (int round = 0; round < 3; ++round) {
      t_s.push_back(seconds_of(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.f, av.data(),
                        int(s.k), bv.data(), int(s.n), 0.f, cv.data(), int(s.n));
          },
          reps));
      t_f.push_back(seconds_of([&] { f32.run(st); }, reps));
      t_b.push_back(seconds_of([&] { bf16.run(st); }, reps));
    }
    using attnlab::bench::median;
    const double flop = 2.0 * double(s.m) * double(s.n) * double(s.k);
    const double gs = flop / median(t_s) * 1e-9, gf = flop / median(t_f) * 1e-9, gb = flop / median(t_b) * 1e-9;
    char name[64];
    std::snprintf(name, sizeof name, "(%lld, %lld, %lld)", (long long)s.m, (long long)s.n, (long long)s.k);
    std::printf("%-42s %10.1f %10.1f %10.1f %9.2fx %9.2fx  %s\n", (std::string(name) + " " + s.what).substr(0, 42).c_str(),
                gs, gf, gb, gb / gf, gb / gs, bf16.impl.c_str());
  }
  return 0;
}

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

}  // namespace

int main(int argc, char** argv) {
  int64_t threads = 2, reps = 5;
  CLI::App app("bench_bf16_matmul: oneDNN bf16 matrix products against OpenBLAS sgemm");
  app.add_option("--threads", threads, "threads of both libraries")->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "repetitions (the median is reported)")->check(CLI::Range(1, 100000));
  attnlab::bench::parse_or_exit(app, argc, argv);
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

// Shared by the benchmark programs that state a share of the sgemm peak: OpenBLAS's GFLOP/s on
// a 2048^3 product with `threads` threads, the yardstick of docs/performance.md ("Kernel
// throughput", the LM step's share).
#pragma once
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"

namespace attnlab::bench {

// OpenBLAS's idle threads spin for a while before they sleep: a pause before the next timing.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

// The median seconds of f over `reps` calls after one warm-up call.
template <class F>
double time_median(F&& f, int reps) {
  f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

// GFLOP/s of cblas_sgemm on (2048 x 2048) @ (2048 x 2048) with OpenBLAS's own `threads`
// threads (attnlab keeps OpenBLAS at one thread and restores that), median of `reps`.
inline double sgemm_peak(int threads, int reps) {
  constexpr int n = 2048;
  Generator gen(2);
  Tensor a = randn({n, n}, gen), b = randn({n, n}, gen), c = empty({n, n});  // (n, n) each
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = c.data<float>();
  const int saved = openblas_get_num_threads();  // attnlab keeps it at 1
  openblas_set_num_threads(threads);
  // Enough calls per repetition to last a fraction of a second on any machine.
  auto calls = [&] {
    for (int i = 0; i < 3; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n);
  };
  const double t = time_median(calls, std::max(3, reps)) / 3;
  openblas_set_num_threads(saved);
  settle();
  return 2.0 * n * n * double(n) / t / 1e9;
}

}  // namespace attnlab::bench

/// @file
/// Threads. attnlab runs every parallel loop on one oneTBB arena and calls OpenBLAS
/// single-threaded from inside it: a matrix product is split into row blocks by attnlab, one
/// task each, so BLAS threads and TBB threads never compete for the cores (no
/// oversubscription). The thread count comes from ATTNLAB_NUM_THREADS (like OMP_NUM_THREADS),
/// else the number of cores, and can be changed with set_num_threads().
/// @ingroup tensor
#pragma once
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

/// @addtogroup tensor
/// @{
namespace attnlab {

int num_threads();  ///< the threads parallel loops use (ATTNLAB_NUM_THREADS, else the cores)
void set_num_threads(int n);  ///< sets the thread count (at least 1) and rebuilds the arena
tbb::task_arena& arena();  ///< the oneTBB arena every parallel loop runs in

/// Loops smaller than this many elements run on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

/// Calls f(begin, end) on disjoint chunks of [0, n). Chunk boundaries depend only on n, grain
/// and the thread count, so results are reproducible for a given thread count.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int nt = num_threads();
  if (nt <= 1 || n <= grain) {
    f(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(n / grain, 4 * nt);
  if (chunks < 2) {
    f(int64_t{0}, n);
    return;
  }
  int64_t step = (n + chunks - 1) / chunks;
  arena().execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        for (int64_t c = r.begin(); c < r.end(); ++c)
                          f(c * step, std::min(n, (c + 1) * step));
                      },
                      tbb::simple_partitioner());
  });
}

}  // namespace attnlab
/// @}

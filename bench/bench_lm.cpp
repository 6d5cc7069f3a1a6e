// bench_lm: one training step of the reference causal LM (4 layers, d=256, 8 heads, N=256,
// batch 8, vocabulary 256, GELU feed-forward 4x, AdamW; bench/reference_lm.hpp) in attnlab;
// prints JSON with tokens/s and the median time of opt.step() alone (adam_ms).
// bench/torch_lm.py runs the same model in PyTorch; bench/run.sh prints the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"
#include "bench/reference_lm.hpp"

using namespace attnlab;

int main(int argc, char** argv) {
  int steps = 10;
  CLI::App app("bench_lm: training steps of the reference causal LM (tokens/s, system allocations per step)");
  app.add_option("STEPS", steps, "timed steps after two warm-up steps")->check(CLI::Range(1, 1000000));
  bench::parse_or_exit(app, argc, argv);
  bench::LMTraining lm("mha(heads=8)");
  constexpr int64_t B = bench::LMTraining::kBatch, N = bench::LMTraining::kLength;
  for (int i = 0; i < 2; ++i) lm.step();  // warm-up: caches filled, allocator primed
  const auto allocs0 = allocator_stats().system_allocs;
  std::vector<double> times, adam_times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    const double adam_seconds = lm.step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    adam_times.push_back(adam_seconds);
  }
  std::sort(times.begin(), times.end());
  std::sort(adam_times.begin(), adam_times.end());
  const double median = times[times.size() / 2];
  const double adam_median = adam_times[adam_times.size() / 2];
  std::printf("{\"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"threads\": %d, \"params\": %lld, "
              "\"system_allocs_per_step\": %.2f, \"peak_bytes\": %lld, \"adam_ms\": %.3f}\n",
              double(B * N) / median, median * 1e3, num_threads(), (long long)lm.model.num_parameters(),
              double(allocator_stats().system_allocs - allocs0) / steps, (long long)allocator_stats().peak_bytes_in_use, adam_median * 1e3);
  return 0;
}

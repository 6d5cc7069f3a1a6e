// bench_lm: one training step of the reference causal LM (4 layers, d=256, 8 heads, N=256,
// batch 8, vocabulary 256, GELU feed-forward 4x, AdamW; bench/reference_lm.hpp) in attnlab, or
// with --gpt2-small of GPT-2 small (12 layers, d=768, 12 heads, vocabulary 50,257, batch 4 x 64,
// head tied to the token embedding; --untied: its own head); prints JSON with tokens/s, the
// median step time and the median time of opt.step() alone (adam_ms).
// bench/torch_lm.py runs the same models in PyTorch; bench/run_lm.sh and bench/run_gpt2.sh
// print the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <ctime>
#include <vector>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"
#include "bench/reference_lm.hpp"

using namespace attnlab;

int main(int argc, char** argv) {
  int steps = 10;
  bool gpt2 = false, untied = false;
  CLI::App app("bench_lm: training steps of the reference causal LM (tokens/s, system allocations per step)");
  app.add_option("STEPS", steps, "timed steps after two warm-up steps")->check(CLI::Range(1, 1000000));
  app.add_flag("--gpt2-small", gpt2, "GPT-2 small (124M parameters) at batch 4 x 64 tokens, head tied to the token embedding");
  app.add_flag("--untied", untied, "with --gpt2-small: the LM head has its own weight and bias")->needs("--gpt2-small");
  bool mark = false;
  app.add_flag("--mark", mark,
               "print to stderr the CLOCK_MONOTONIC second at which the timed steps start (for perf record -k "
               "CLOCK_MONOTONIC; perf report --time START,)");
  bench::parse_or_exit(app, argc, argv);
  bench::LMTraining lm = gpt2 ? bench::LMTraining(bench::gpt2_small(!untied)) : bench::LMTraining("mha(heads=8)");
  const int64_t B = lm.shape.batch, N = lm.shape.length;
  for (int i = 0; i < 2; ++i) lm.step();  // warm-up: caches filled, allocator primed
  const auto allocs0 = allocator_stats().system_allocs;
  if (mark) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    std::fprintf(stderr, "bench_lm: timed steps start at %ld.%06ld\n", (long)now.tv_sec, now.tv_nsec / 1000);
  }
  std::vector<double> times, adam_times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    const double adam_seconds = lm.step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    adam_times.push_back(adam_seconds);
  }
  // Distinct parameters: a tied head's weight aliases tok_emb.weight and counts once (as in torch).
  std::set<std::pair<const void*, int64_t>> seen;
  int64_t params = 0;
  for (const Tensor& p : lm.model.parameters())
    if (seen.insert({p.storage().get(), p.offset()}).second) params += p.numel();
  std::sort(times.begin(), times.end());
  std::sort(adam_times.begin(), adam_times.end());
  const double median = times[times.size() / 2];
  const double adam_median = adam_times[adam_times.size() / 2];
  std::printf("{\"model\": \"%s\", \"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"step_ms_min\": %.2f, \"step_ms_max\": %.2f, \"threads\": %d, \"params\": %lld, "
              "\"system_allocs_per_step\": %.2f, \"peak_bytes\": %lld, \"adam_ms\": %.3f}\n",
              lm.shape.name.c_str(), double(B * N) / median, median * 1e3, times.front() * 1e3, times.back() * 1e3,
              num_threads(), (long long)params,
              double(allocator_stats().system_allocs - allocs0) / steps, (long long)allocator_stats().peak_bytes_in_use, adam_median * 1e3);
  return 0;
}

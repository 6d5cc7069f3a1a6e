// bench_lm: one training step of the reference causal LM (4 layers, d=256, 8 heads, N=256,
// batch 8, vocabulary 256, GELU feed-forward 4x, AdamW; bench/reference_lm.hpp) in attnlab, or
// with --gpt2-small of GPT-2 small (12 layers, d=768, 12 heads, vocabulary 50,257, batch 4 x 64,
// head tied to the token embedding; --untied: its own head); prints JSON with tokens/s, the
// median step time and the median time of opt.step() alone (adam_ms).
// --routes openblas,auto times the steps under each float32 matrix-product route in turn
// (tensor/matmul_route.hpp), alternating for --rounds rounds of STEPS steps each in one process,
// and prints one JSON line per route (medians over all its steps) and the step-time ratios.
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
#include "tensor/blas_info.hpp"
#include "tensor/matmul_route.hpp"

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
  std::vector<std::string> routes;
  int rounds = 3;
  app.add_option("--routes", routes, "float32 product routes to alternate (auto, openblas, onednn), e.g. openblas,auto")
      ->delimiter(',');
  app.add_option("--rounds", rounds, "with --routes: rounds of STEPS steps per route")->check(CLI::Range(1, 1000));
  bench::parse_or_exit(app, argc, argv);
  std::vector<MatmulRoute> route_list;
  try {
    for (const std::string& r : routes) route_list.push_back(parse_matmul_route(r, "--routes"));
  } catch (const ValueError& e) {
    std::fprintf(stderr, "bench_lm: %s\n", e.what());
    return 2;
  }
  bench::LMTraining lm = gpt2 ? bench::LMTraining(bench::gpt2_small(!untied)) : bench::LMTraining("mha(heads=8)");
  const int64_t B = lm.shape.batch, N = lm.shape.length;
  for (int i = 0; i < 2; ++i) lm.step();  // warm-up: caches filled, allocator primed
  const auto allocs0 = allocator_stats().system_allocs;
  if (mark) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    std::fprintf(stderr, "bench_lm: timed steps start at %ld.%06ld\n", (long)now.tv_sec, now.tv_nsec / 1000);
  }
  if (!route_list.empty()) {
    // Alternating rounds: each route's steps interleave with the others', so load drifts alike.
    std::vector<std::vector<double>> per(route_list.size());
    for (int round = 0; round < rounds; ++round)
      for (size_t r = 0; r < route_list.size(); ++r) {
        set_matmul_route(route_list[r]);
        lm.step();  // the route's primitives built, its buffers cached
        for (int i = 0; i < steps; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          lm.step();
          per[r].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
      }
    std::vector<double> med(route_list.size());
    for (size_t r = 0; r < route_list.size(); ++r) {
      std::sort(per[r].begin(), per[r].end());
      med[r] = per[r][per[r].size() / 2];
      set_matmul_route(route_list[r]);
      std::printf(
          "{\"model\": \"%s\", \"route\": \"%s\", \"tokens_per_s\": %.1f, \"step_ms\": %.2f, "
          "\"step_ms_min\": %.2f, \"step_ms_max\": %.2f, \"steps\": %zu, \"threads\": %d, \"blas\": \"%s\", "
          "\"rule\": \"%s\"}\n",
          lm.shape.name.c_str(), matmul_route_name(route_list[r]), double(B * N) / med[r], med[r] * 1e3,
          per[r].front() * 1e3, per[r].back() * 1e3, per[r].size(), num_threads(), blas_description().c_str(),
          matmul_route_description().c_str());
    }
    for (size_t r = 1; r < route_list.size(); ++r)
      std::printf("step time %s / %s: %.3f\n", matmul_route_name(route_list[r]), matmul_route_name(route_list[0]),
                  med[r] / med[0]);
    return 0;
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

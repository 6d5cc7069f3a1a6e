// bench_lm: one training step of the reference causal LM (4 layers, d=256, 8 heads, N=256,
// batch 8, vocabulary 256, GELU feed-forward 4x, AdamW) in attnlab; prints JSON with tokens/s
// and the median time of opt.step() alone (adam_ms).
// bench/torch_lm.py runs the same model in PyTorch; bench/run.sh prints the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "attnlab.hpp"
#include "nn/loss.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"

using namespace attnlab;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 10;
  const int64_t B = 8, N = 256, V = 256;
  manual_seed(0);
  nn::LMConfig cfg;
  cfg.block.d_model = 256;
  cfg.block.attention = "mha(heads=8)";
  cfg.layers = 4;
  cfg.vocab_size = V;
  cfg.max_len = N;
  nn::CausalLM model(cfg);
  optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  Generator gen(1);
  Tensor x = randint(0, V, {B, N}, gen), y = randint(0, V, {B, N}, gen);
  double adam_seconds = 0;  // the last opt.step()'s time, timed on its own
  auto step = [&] {
    Tensor loss = nn::cross_entropy(reshape(model.forward(x), {B * N, V}), reshape(y, {B * N}));
    opt.zero_grad();
    loss.backward();
    auto t0 = std::chrono::steady_clock::now();
    opt.step();
    adam_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: caches filled, allocator primed
  const auto allocs0 = allocator_stats().system_allocs;
  std::vector<double> times, adam_times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    adam_times.push_back(adam_seconds);
  }
  std::sort(times.begin(), times.end());
  std::sort(adam_times.begin(), adam_times.end());
  const double median = times[times.size() / 2];
  const double adam_median = adam_times[adam_times.size() / 2];
  std::printf("{\"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"threads\": %d, \"params\": %lld, "
              "\"system_allocs_per_step\": %.2f, \"peak_bytes\": %lld, \"adam_ms\": %.3f}\n",
              double(B * N) / median, median * 1e3, num_threads(), (long long)model.num_parameters(),
              double(allocator_stats().system_allocs - allocs0) / steps, (long long)allocator_stats().peak_bytes_in_use, adam_median * 1e3);
  return 0;
}

// bench_mha_options: one training step (forward + backward, the fused path) of an `mha` layer
// with each option of current models on (docs/attention.md, "Options of current models"),
// timed against plain mha of the same sizes and printed as ratios.
//
//   bench_mha_options [--n N] [--batch B] [--steps S]
//
// D = 512, h = 8, dk = dv = 64, causal, float32; x (B, N, D) requires grad, the loss is
// sum(y * g) for a fixed random g. Each row is the median of S steps after one warm-up step.
// The ratio is the option's time over plain mha's (1.00 = no cost).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench_args.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using attnlab::bench::median;
using Clock = std::chrono::steady_clock;

namespace {

// Median seconds of one forward + backward step of `spec` on x (B, N, 512).
double step_seconds(const std::string& spec, int64_t batch, int64_t n, int64_t steps) {
  manual_seed(0);
  auto attn = nn::make_attention(spec, 512);
  Generator gen(1);
  Tensor x = randn({batch, n, 512}, gen).requires_grad_();  // (B, N, D)
  Tensor g = randn({batch, n, 512}, gen);                    // (B, N, D)
  std::vector<double> times;
  for (int64_t s = 0; s <= steps; ++s) {
    attn->zero_grad();
    x.set_grad(Tensor());
    const auto t0 = Clock::now();
    sum(attn->forward(x, {}, {}, /*causal=*/true).output * g).backward();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) times.push_back(dt);  // step 0 warms caches and the thread pool
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 1024, batch = 1;
  int64_t steps = 5;
  bench::parse_flags(argc, argv, "bench_mha_options [--n N] [--batch B] [--steps S]",
                     {{"--n", &n}, {"--batch", &batch}, {"--steps", &steps}});
  const std::string base = "mha(heads=8";
  const std::vector<std::string> options = {
      "",  // plain
      ", kv_heads=2", ", kv_heads=1", ", alibi=true", ", qk_norm=true", ", softcap=30", ", score=sigmoid",
      ", score=softpick", ", sinks=true", ", rope=true",
      ", kv_heads=2, alibi=true, qk_norm=true, softcap=30, sinks=true, rope=true"};
  fmt::print("mha, one training step (fused path), B={}, N={}, D=512, h=8, causal, float32, {} threads, "
             "median of {} steps\n",
             batch, n, num_threads(), steps);
  fmt::print("{:<88} {:>8} {:>6}\n", "spec", "seconds", "ratio");
  double plain = 0;
  for (const std::string& o : options) {
    const std::string spec = base + o + ")";
    const double t = step_seconds(spec, batch, n, steps);
    if (o.empty()) plain = t;
    fmt::print("{:<88} {:>8.4f} {:>6.2f}\n", spec, t, t / plain);
  }
  return 0;
}

// bench_mha_options: one training step with each `mha` option of current models on
// (docs/attention.md, "Options of current models"), timed against plain mha and printed as ratios.
//
//   bench_mha_options [--n N] [--batch B] [--steps S]     one mha layer (default)
//   bench_mha_options --lm [--steps S]                     the reference LM
//
// Layer mode: forward + backward of one layer (the fused path), D = 512, h = 8, dk = dv = 64,
// causal, float32; x (B, N, D) requires grad, the loss is sum(y * g) for a fixed random g.
// LM mode: the whole training step of the reference LM (bench/reference_lm.hpp: 4 layers, d = 256,
// 8 heads, dk = dv = 32, N = 256, batch 8, learned positions; forward, cross-entropy, backward,
// AdamW) with the spec in every layer.
// Every configuration is built first and warmed up (one step, two for the LM), then the timed
// steps go round the configurations in turn, so that each sees the same share of a shared
// machine's load. Each row is the median of its S steps; the ratio is the option's time over
// plain mha's (1.00 = no cost), tokens/s = B N / that median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench/reference_lm.hpp"
#include "nn/attention/registry.hpp"
#include "bench/bench_args.hpp"

using namespace attnlab;
using Clock = std::chrono::steady_clock;

namespace {

using attnlab::bench::median;

// One configuration: a step to time and its times.
struct Config {
  std::string spec;
  std::function<void()> step;
  std::vector<double> times;
};

// Forward + backward of one `spec` layer on x (B, N, 512).
std::function<void()> layer_step(const std::string& spec, int64_t batch, int64_t n) {
  manual_seed(0);
  std::shared_ptr<nn::Attention> attn = nn::make_attention(spec, 512);
  Generator gen(1);
  Tensor x = randn({batch, n, 512}, gen).requires_grad_();  // (B, N, D)
  Tensor g = randn({batch, n, 512}, gen);                    // (B, N, D)
  return [attn, x, g]() mutable {
    attn->zero_grad();
    x.set_grad(Tensor());
    sum(attn->forward(x, {}, {}, /*causal=*/true).output * g).backward();
  };
}

// The reference LM's training step with `spec` in every layer.
std::function<void()> lm_step(const std::string& spec) {
  auto lm = std::make_shared<bench::LMTraining>(spec);
  return [lm] { lm->step(); };
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 1024, batch = 1;
  int steps = 5;
  bool lm = false;
  CLI::App app("bench_mha_options: one training step of mha with each option of current models against plain mha");
  auto* n_opt = app.add_option("--n", n, "sequence length N")->check(CLI::Range(1, 1 << 20));
  auto* batch_opt = app.add_option("--batch", batch, "batch B")->check(CLI::Range(1, 1 << 20));
  app.add_option("--steps", steps, "timed steps (the median is reported)")->check(CLI::Range(1, 100000));
  app.add_flag("--lm", lm, "the reference LM's training step instead of one layer")->excludes(n_opt)->excludes(batch_opt);
  bench::parse_or_exit(app, argc, argv);
  if (lm) batch = bench::LMTraining::kBatch, n = bench::LMTraining::kLength;
  const std::string base = "mha(heads=8";
  const std::vector<std::string> options = {
      "",  // plain
      ", kv_heads=2", ", kv_heads=1", ", alibi=true", ", qk_norm=true", ", softcap=30", ", score=sigmoid",
      ", score=softpick", ", sinks=true", ", rope=true",
      ", kv_heads=2, alibi=true, qk_norm=true, softcap=30, sinks=true, rope=true"};
  std::vector<Config> configs;
  for (const std::string& o : options) {
    const std::string spec = base + o + ")";
    configs.push_back({spec, lm ? lm_step(spec) : layer_step(spec, batch, n), {}});
    for (int w = 0; w < (lm ? 2 : 1); ++w) configs.back().step();  // warms caches and the thread pool
  }
  for (int s = 0; s < steps; ++s)
    for (Config& c : configs) {
      const auto t0 = Clock::now();
      c.step();
      c.times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  if (lm)
    fmt::print("reference LM, one training step (4 layers, d=256, h=8, B={}, N={}, AdamW), float32, {} threads, "
               "median of {} steps, configurations interleaved\n",
               batch, n, num_threads(), steps);
  else
    fmt::print("mha, one training step (fused path), B={}, N={}, D=512, h=8, causal, float32, {} threads, "
               "median of {} steps, configurations interleaved\n",
               batch, n, num_threads(), steps);
  fmt::print("{:<88} {:>8} {:>9} {:>6}\n", "spec", "seconds", "tokens/s", "ratio");
  const double plain = median(configs.front().times);
  for (const Config& c : configs) {
    const double t = median(c.times);
    fmt::print("{:<88} {:>8.4f} {:>9.0f} {:>6.2f}\n", c.spec, t, double(batch * n) / t, t / plain);
  }
  return 0;
}

// bench_bf16_lm: the reference LM's training step (bench/reference_lm.hpp: 4 layers, d = 256,
// 8 heads, N = 256, batch 8, AdamW) in float32 and under autocast(bf16) (autograd/autocast.hpp),
// in one process: identical models stepped alternately, one float32 step, one bf16 step and one
// bf16 step with the fused attention kernel kept float32 (its share of the bf16 step),
// `--steps` of each per round, so both forms see the same machine a fraction of a second apart.
// Prints each round's median tokens/s and bf16 / float32 ratio with the load average (the
// machine may be shared), the median and range of the rounds' ratios, the ratio of the fastest
// steps, the CPU's bf16 flags, the oneDNN kernels the bf16 products ran on, whether the fused
// attention kernel ran its products in bf16 (AVX512_BF16) and OpenBLAS's kernel, and each form's
// counted FLOPs per second (bench::step_flops) against the sgemm peak measured in the same run.
//
//   build/bench/bench_bf16_lm [--rounds R] [--steps S]
//   perf record build/bench/bench_bf16_lm --profile bf16   (one form's steps only)
//   ATTNLAB_TILE_BF16_MIN_KEYS=K build/bench/bench_bf16_lm   (the kernel's size rule at K keys per row)
//
// Without native bf16 (AVX512_BF16 or AMX) or without oneDNN it prints the CPU flags and "not
// measurable on this CPU" (ATTNLAB_AUTOCAST=force measures anyway: oneDNN then converts bf16 to
// float32 and the ratio says how much slower that is).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"
#include "bench/reference_lm.hpp"
#include "bench/sgemm_peak.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/kernels/tile_gemm_bf16.hpp"
#include "tensor/blas_info.hpp"

using namespace attnlab;

namespace {

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// Seconds of one training step, in bf16 under autocast or in float32; kernel_bf16 = false keeps
// the fused attention kernel float32 inside the bf16 step.
double step_seconds(bench::LMTraining& lm, bool bf16, bool kernel_bf16 = true) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<AutocastGuard> autocast;
  if (bf16) autocast.emplace(kBFloat16, AutocastPolicy::Force);
  nn::tile::set_bf16_tile_products_enabled(kernel_bf16);
  lm.step();
  nn::tile::set_bf16_tile_products_enabled(true);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 5, steps = 5;
  std::string profile;
  CLI::App app("bench_bf16_lm: the reference LM's training step in float32 and under bf16 autocast");
  app.add_option("--rounds", rounds, "interleaved rounds of both")->check(CLI::Range(1, 1000));
  app.add_option("--steps", steps, "timed steps per round")->check(CLI::Range(1, 100000));
  app.add_option("--profile", profile,
                 "run only --rounds x --steps steps of one form, for a profiler (perf record); prints their tokens/s")
      ->check(CLI::IsMember({"float32", "bf16"}));
  bench::parse_or_exit(app, argc, argv);
  std::printf("CPU: %s\nBLAS: %s\noneDNN: %s\nthreads: %d\n", cpu_bf16_summary().c_str(), blas_description().c_str(),
              onednn_description().c_str(), num_threads());
  if (const char* keys = std::getenv("ATTNLAB_TILE_BF16_MIN_KEYS"))  // the kernel's size rule, for measuring it
    nn::tile::set_bf16_min_keys_per_row(std::stoll(keys));
  const AutocastDecision d = autocast_decision(autocast_policy_from_env());
  std::printf("autocast: %s\n", d.reason.c_str());
  if (d.bf16) {
    AutocastGuard probe(kBFloat16, AutocastPolicy::Force);
    std::printf("fused attention kernel under autocast: %s\n",
                nn::tile_attention_runs_bf16(kFloat32)
                    ? fmt::format("bf16 products (AVX512_BF16 tile kernel) where query rows have {} or more keys on "
                                  "average (here, causal N = {}: {})", nn::tile::bf16_min_keys_per_row(),
                                  bench::LMTraining::kLength,
                                  (bench::LMTraining::kLength + 1) / 2 >= nn::tile::bf16_min_keys_per_row() ? "bf16" : "float32").c_str()
                    : "float32 (no AVX512_BF16)");
  }
  if (!d.bf16) {
    std::printf("bf16 / float32 LM training step: not measurable on this CPU\n");
    return 0;
  }
  constexpr int64_t tokens = bench::LMTraining::kBatch * bench::LMTraining::kLength;
  if (!profile.empty()) {  // one form only: its steps are all a profiler sees
    bench::LMTraining lm("mha(heads=8)");
    double seconds = 0;
    for (int64_t i = 0; i < 2 + rounds * steps; ++i) {
      const double t = step_seconds(lm, profile == "bf16");
      if (i >= 2) seconds += t;
    }
    std::printf("%s: %lld steps, %.0f tokens/s\n", profile.c_str(), (long long)(rounds * steps),
                tokens * double(rounds * steps) / seconds);
    return 0;
  }
  // b16k: bf16 products with the fused attention kernel kept float32, the kernel's share of the step.
  bench::LMTraining f32("mha(heads=8)"), b16("mha(heads=8)"), b16k("mha(heads=8)");
  const double peak_before = bench::sgemm_peak(num_threads(), 3);  // the yardstick, before and after the rounds
  for (int i = 0; i < 2; ++i)  // warm-up: caches, allocator, oneDNN
    step_seconds(f32, false), step_seconds(b16, true), step_seconds(b16k, true, false);
  std::printf("\n%-6s %14s %14s %8s %22s %8s  %s\n", "round", "f32 tokens/s", "bf16 tokens/s", "ratio",
              "bf16, kernel f32 tok/s", "ratio", "load average (1 5 15 min)");
  std::vector<double> ratios, ratios_k, all_f, all_b;
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<double> tf, tb, tk;
    for (int64_t i = 0; i < steps; ++i) {  // one step of each, alternating
      tf.push_back(step_seconds(f32, false));
      tb.push_back(step_seconds(b16, true));
      tk.push_back(step_seconds(b16k, true, false));
    }
    all_f.insert(all_f.end(), tf.begin(), tf.end());
    all_b.insert(all_b.end(), tb.begin(), tb.end());
    const double mf = bench::median(tf), mb = bench::median(tb), mk = bench::median(tk);
    ratios.push_back(mf / mb);
    ratios_k.push_back(mf / mk);
    std::printf("%-6lld %14.0f %14.0f %7.2fx %22.0f %7.2fx  %s\n", (long long)r, tokens / mf, tokens / mb, mf / mb,
                tokens / mk, mf / mk, load_average().c_str());
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(ratios_k.begin(), ratios_k.end());
  std::printf("\nbf16 with the fused kernel kept float32 / float32: median of the rounds' ratios %.2fx, range %.2fx-%.2fx",
              bench::median(ratios_k), ratios_k.front(), ratios_k.back());
  std::printf("\nbf16 / float32 tokens/s, %lld rounds of %lld alternating steps each: median of the rounds' ratios %.2fx, "
              "range %.2fx-%.2fx; fastest step of each form %.0f and %.0f tokens/s, %.2fx\n",
              (long long)rounds, (long long)steps, bench::median(ratios), ratios.front(), ratios.back(),
              tokens / *std::min_element(all_f.begin(), all_f.end()), tokens / *std::min_element(all_b.begin(), all_b.end()),
              *std::min_element(all_f.begin(), all_f.end()) / *std::min_element(all_b.begin(), all_b.end()));
  // The step's counted FLOPs (bench::step_flops) per second against the sgemm peak, the better of
  // the two taken around the rounds on a shared machine.
  const double peak = std::max(peak_before, bench::sgemm_peak(num_threads(), 3));
  const double flops = bench::step_flops(bench::LMShape{});
  const double gf32 = flops / bench::median(all_f) / 1e9, gb16 = flops / bench::median(all_b) / 1e9;
  std::printf("the step's products (%.1f GFLOP): float32 %.0f GFLOP/s = %.0f%% of the sgemm peak (%.0f GFLOP/s, 2048^3, "
              "%d threads, same OpenBLAS kernel), bf16 %.0f GFLOP/s = %.0f%% of it\n",
              flops / 1e9, gf32, 100 * gf32 / peak, peak, num_threads(), gb16, 100 * gb16 / peak);
  std::string kernels;
  for (const std::string& k : onednn_kernels_used()) kernels += (kernels.empty() ? "" : ", ") + k;
  std::printf("oneDNN kernels of the bf16 products: %s\n", kernels.c_str());
  return 0;
}

// bench_attention: attnlab's half of `make bench-attention` (bench/run_attention.sh runs it next
// to bench/torch_attention.py and joins both into markdown tables). One attention layer core,
// B = 1, h = 8, dk = dv = 64 (--batch, --head-size change B and dk = dv), float32, forward +
// backward, at long sequence lengths.
//
// Two modes, each printing one JSON object on stdout (progress on stderr):
//
//   bench_attention --n N [--causal] [--path kernel|module] [--steps S] [--memory-limit GIB]
//     One measurement, meant to run in a fresh process (run_attention.sh starts one per side and
//     N, under a time limit): sets RLIMIT_AS to the memory limit first, so running out of memory
//     is a caught std::bad_alloc ("status": "oom", exit status 3), not the machine swapping.
//     path kernel: nn::tile_attention on leaves q, k, v (1, 8, N, 64) with the dense pattern
//     mha builds when it returns no probabilities (lo = 0, hi = N, or hi = i + 1 if causal),
//     then backward from a random upstream gradient. path module: the same through the
//     nn::Attention module "mha" (projections included) on x (1, N, 512).
//     Reports the median seconds of S steps after a warm-up step, and the peak RSS (ru_maxrss).
//
//   bench_attention --throughput [--lengths 4096,8192] [--reps R] [--q-tile 128] [--k-tile 256] [--blas-too]
//     The kernel's GFLOP/s, forward only and forward + backward (its float32 products on AVX-512
//     where the CPU has it, tile_gemm_f32.hpp; --blas-too adds rows on cblas_sgemm, the
//     repetitions of both alternating), against the peak of
//     cblas_sgemm 2048 x 2048 x 2048 measured in this process with OpenBLAS set to attnlab's
//     thread count (as bench_ops does; attnlab keeps OpenBLAS at one thread inside its own
//     tasks, and the count is restored after; the better of a peak taken before and one after
//     the kernel rows is kept). FLOPs follow FlashAttention-2 (Dao 2023): forward 4 N M dk h
//     (two products), forward + backward 3.5x that (backward does five products to forward's
//     two); causal counts only the allowed pairs, N (N + 1) / 2.
//
//   bench_attention --bf16 [--lengths 4096,8192] [--reps R] [--causal]
//     The kernel's GFLOP/s in float32 and under AutocastGuard(kBFloat16) (its products in bf16 on
//     AVX512_BF16; nn/attention/kernels/tile_gemm_bf16.hpp), forward and forward + backward, on
//     the same q, k, v: each repetition times float32 then bf16, so both see the same load. Prints
//     the median GFLOP/s of each, the median and range of the repetitions' bf16 / float32 ratios,
//     and the CPU's bf16 flags; on a CPU where the kernel stays float32 it says so. Below the
//     kernel's size rule (tile_gemm_bf16.hpp: 128 keys per query row) both columns run float32;
//     ATTNLAB_TILE_BF16_MIN_KEYS=0 measures bf16 there too.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>
#include <fmt/format.h>

#include "attnlab.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/kernels/tile_gemm_bf16.hpp"
#include "nn/attention/kernels/tile_gemm_f32.hpp"
#include "nn/attention/registry.hpp"
#include "bench/bench_args.hpp"
#include "bench/sgemm_peak.hpp"
#include "tensor/blas_info.hpp"

using namespace attnlab;
using Clock = std::chrono::steady_clock;

namespace {

// The kernel path's batch and head size (--batch, --head-size); 8 heads.
constexpr int64_t kHeads = 8;
int64_t g_batch = 1, g_head_size = 64;
constexpr int kOomExit = 3;  // run_attention.sh reads this exit status as "out of memory"

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using attnlab::bench::median;
using attnlab::bench::settle;
using attnlab::bench::sgemm_peak;

// Steps timed at length n when --steps is not given: few at large N, so that N = 32K (minutes
// per step on a small machine) finishes in a couple of minutes. torch_attention.py uses the same.
int default_steps(int64_t n) { return n <= 2048 ? 5 : n <= 8192 ? 3 : 1; }

// The warm-up runs one step at this length: the full one up to 8K; beyond, a 2K step is enough to
// start the thread pool and BLAS and fill the allocator's caches, and a full one would double
// the time of the largest measurements.
int64_t warmup_length(int64_t n) { return n <= 8192 ? n : 2048; }

// The pattern mha builds for its fused path without a mask (nn/attention/mha.cpp).
nn::TilePattern dense_pattern(int64_t n, bool causal) {
  nn::TilePattern p;
  p.lo.assign(n, 0);
  p.hi.resize(n);
  for (int64_t i = 0; i < n; ++i) p.hi[i] = causal ? i + 1 : n;
  return p;
}

// Tile sizes of the kernel path (--q-tile, --k-tile); the library's defaults unless set.
nn::TileOptions g_tiles;

// One forward + backward of the kernel or the module at length n; returns a callable step.
struct Problem {
  std::shared_ptr<nn::Attention> layer;  // path module only
  Tensor q, k, v, x, g;
  nn::TilePattern pattern;
  bool causal = false;

  Problem(const std::string& path, int64_t n, bool causal_) : causal(causal_) {
    Generator gen(1);
    if (path == "module") {
      manual_seed(0);
      const int64_t d = g_head_size;
      layer = nn::make_attention(fmt::format("mha(heads={}, key_size={}, value_size={})", kHeads, d, d), kHeads * d);
      x = randn({g_batch, n, kHeads * d}, gen).requires_grad_();  // (B, N, D)
      g = randn({g_batch, n, kHeads * d}, gen);                   // (B, N, D)
    } else {
      const int64_t B = g_batch, d = g_head_size;
      q = randn({B, kHeads, n, d}, gen).requires_grad_();  // (B, h, N, dk)
      k = randn({B, kHeads, n, d}, gen).requires_grad_();  // (B, h, M, dk)
      v = randn({B, kHeads, n, d}, gen).requires_grad_();  // (B, h, M, dv)
      g = randn({B, kHeads, n, d}, gen);                   // (B, h, N, dv) upstream gradient
      pattern = dense_pattern(n, causal);
    }
  }
  void step() {
    if (layer) {
      Tensor y = layer->forward(x, {}, {}, causal, false).output;  // (B, N, D), the fused path
      y.backward(g);
      layer->zero_grad();
      x.set_grad({});
    } else {
      Tensor o = nn::tile_attention(q, k, v, pattern, g_tiles).out;  // (B, h, N, dv)
      o.backward(g);
      q.set_grad({}), k.set_grad({}), v.set_grad({});
    }
  }
  void forward_only() {
    NoGradGuard no_grad;
    Tensor o = nn::tile_attention(q, k, v, pattern, g_tiles).out;  // (B, h, N, dv)
  }
};

int run_one(const std::string& path, int64_t n, bool causal, int steps, double memory_gib) {
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(memory_gib * double(1 << 30));
  if (setrlimit(RLIMIT_AS, &lim) != 0) fail<ValueError>("bench_attention: setrlimit(RLIMIT_AS, {} GiB) failed", memory_gib);
  const std::string head = fmt::format("{{\"side\": \"attnlab\", \"path\": \"{}\", \"n\": {}, \"causal\": {}, ", path,
                                       n, causal ? "true" : "false");
  try {
    {
      Problem warm(path, warmup_length(n), causal);
      warm.step();
    }
    Problem p(path, n, causal);
    std::vector<double> times;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      p.step();
      times.push_back(since(t0));
      std::fprintf(stderr, "bench_attention: %s N=%lld%s step %d: %.3f s\n", path.c_str(), (long long)n,
                   causal ? " causal" : "", s + 1, times.back());
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    std::printf("%s\"status\": \"ok\", \"seconds\": %.6f, \"steps\": %d, \"max_rss_kib\": %ld, \"threads\": %d}\n",
                head.c_str(), median(times), steps, ru.ru_maxrss, num_threads());
  } catch (const std::bad_alloc&) {
    std::printf("%s\"status\": \"oom\"}\n", head.c_str());
    std::fflush(stdout);
    return kOomExit;
  }
  return 0;
}

// ---- throughput ----

// Median seconds of the forward and of forward + backward, the float32 products on AVX-512
// (tile_gemm_f32.hpp) or, with on_blas, on cblas_sgemm; with both, repetitions alternate.
struct ProductTimes {
  double forward = 0, step = 0;
};
std::vector<ProductTimes> time_products(Problem& p, int reps, const std::vector<bool>& on_blas) {
  std::vector<std::vector<double>> tf(on_blas.size()), tb(on_blas.size());
  for (int r = -1; r < reps; ++r)  // r = -1: warm-up
    for (size_t f = 0; f < on_blas.size(); ++f) {
      nn::tile::set_f32_tile_products_enabled(!on_blas[f]);
      auto t0 = Clock::now();
      p.forward_only();
      const double forward = since(t0);
      t0 = Clock::now();
      p.step();
      if (r >= 0) tf[f].push_back(forward), tb[f].push_back(since(t0));
    }
  nn::tile::set_f32_tile_products_enabled(true);
  std::vector<ProductTimes> out;
  for (size_t f = 0; f < on_blas.size(); ++f) out.push_back({median(tf[f]), median(tb[f])});
  return out;
}

int run_throughput(const std::vector<int64_t>& lengths, int reps, bool blas_too) {
  const int threads = num_threads();  // also pins OpenBLAS to 1 thread inside attnlab
  std::fprintf(stderr, "bench_attention: throughput, %d thread(s), %s; float32 tile products: %s\n", threads,
               openblas_get_config(), nn::tile::f32_tile_products_available() ? "AVX-512" : "cblas_sgemm");
  std::vector<bool> on_blas = {!nn::tile::f32_tile_products_available()};
  if (blas_too && !on_blas[0]) on_blas.push_back(true);
  // The peak is taken before and after the kernel rows and the better one kept: on a shared
  // machine a peak taken in a quiet moment makes the kernel's fraction conservative.
  double peak = sgemm_peak(threads, reps);
  std::fprintf(stderr, "  sgemm 2048^3: %.1f GFLOP/s\n", peak);
  std::string rows;
  for (int64_t n : lengths)
    for (bool causal : {false, true}) {
      Problem p("kernel", n, causal);
      const double pairs = causal ? double(n) * double(n + 1) / 2 : double(n) * double(n);
      const double fwd_gflop = 4.0 * pairs * g_head_size * kHeads * g_batch / 1e9;
      const std::vector<ProductTimes> times = time_products(p, reps, on_blas);
      for (size_t f = 0; f < on_blas.size(); ++f) {
        const double tf = times[f].forward, tb = times[f].step;
        const char* products = on_blas[f] ? "cblas_sgemm" : "avx512";
        std::fprintf(stderr, "  N=%lld%s, %s: forward %.3f s (%.1f GFLOP/s), forward + backward %.3f s (%.1f GFLOP/s)\n",
                     (long long)n, causal ? " causal" : "", products, tf, fwd_gflop / tf, tb, 3.5 * fwd_gflop / tb);
        rows += fmt::format(
            "{}    {{\"n\": {}, \"causal\": {}, \"products\": \"{}\", \"forward_seconds\": {:.6f}, "
            "\"forward_gflops\": {:.3f}, \"step_seconds\": {:.6f}, \"step_gflops\": {:.3f}}}",
            rows.empty() ? "" : ",\n", n, causal ? "true" : "false", products, tf, fwd_gflop / tf, tb,
            3.5 * fwd_gflop / tb);
      }
      settle();
    }
  const double peak_after = sgemm_peak(threads, reps);
  std::fprintf(stderr, "  sgemm 2048^3 again: %.1f GFLOP/s\n", peak_after);
  peak = std::max(peak, peak_after);
  std::printf("{\"threads\": %d, \"blas\": \"%s\", \"sgemm_gflops\": %.3f, \"rows\": [\n%s\n]}\n", threads,
              openblas_get_config(), peak, rows.c_str());
  return 0;
}

// Median seconds of f in float32 and in bf16, alternating, and the median and range of the ratios.
struct Paired {
  double f32 = 0, bf16 = 0, ratio = 0, lo = 0, hi = 0;
};
template <class F>
Paired time_paired(F&& f, int reps) {
  auto once = [&](bool bf16) {
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(kBFloat16, AutocastPolicy::Force);
    const auto t0 = Clock::now();
    f();
    return since(t0);
  };
  once(false), once(true);  // warm-up
  std::vector<double> tf, tb, ratios;
  for (int r = 0; r < reps; ++r) {
    tf.push_back(once(false));
    tb.push_back(once(true));
    ratios.push_back(tf.back() / tb.back());
  }
  std::sort(ratios.begin(), ratios.end());
  return {median(tf), median(tb), median(ratios), ratios.front(), ratios.back()};
}

double parse_number(const std::string& option, const std::string& s, double min);

int run_bf16(const std::vector<int64_t>& lengths, int reps, bool causal) {
  if (const char* keys = std::getenv("ATTNLAB_TILE_BF16_MIN_KEYS"))
    nn::tile::set_bf16_min_keys_per_row(static_cast<int64_t>(parse_number("ATTNLAB_TILE_BF16_MIN_KEYS", keys, 0)));
  std::printf("CPU: %s\nBLAS: %s\nthreads: %d\n", cpu_bf16_summary().c_str(), blas_description().c_str(), num_threads());
  {
    AutocastGuard probe(kBFloat16, AutocastPolicy::Force);
    if (!nn::tile_attention_runs_bf16(kFloat32)) {
      std::printf("tile_attention in bf16: not measurable on this CPU (no AVX512_BF16, or autocast off)\n");
      return 0;
    }
  }
  std::printf("kernel products in bf16: AVX512_BF16 vdpbf16ps tile kernel where query rows have %lld or more keys "
              "(the size rule; ATTNLAB_TILE_BF16_MIN_KEYS overrides it here); float32 products: %s\n",
              (long long)nn::tile::bf16_min_keys_per_row(),
              nn::tile::f32_tile_products_available() ? "AVX-512 tile products" : "OpenBLAS sgemm");
  std::printf("\n| N | causal | pass | float32 GFLOP/s | bf16 GFLOP/s | bf16 / float32, %d reps | load (1 min) |\n", reps);
  std::printf("|---:|---|---|---:|---:|---:|---:|\n");
  for (int64_t n : lengths) {
    Problem p("kernel", n, causal);
    const double pairs = causal ? double(n) * double(n + 1) / 2 : double(n) * double(n);
    const double fwd_gflop = 4.0 * pairs * g_head_size * kHeads * g_batch / 1e9;
    for (bool backward : {false, true}) {
      const Paired t = backward ? time_paired([&] { p.step(); }, reps) : time_paired([&] { p.forward_only(); }, reps);
      const double gflop = backward ? 3.5 * fwd_gflop : fwd_gflop;
      std::ifstream in("/proc/loadavg");
      std::string load;
      in >> load;
      std::printf("| %lld | %s | %s | %.1f | %.1f | %.2fx (%.2f-%.2fx) | %s |\n", (long long)n,
                  causal ? "yes" : "no", backward ? "forward + backward" : "forward", gflop / t.f32, gflop / t.bf16,
                  t.ratio, t.lo, t.hi, load.c_str());
      std::fflush(stdout);
      settle();
    }
  }
  return 0;
}

double parse_number(const std::string& option, const std::string& s, double min) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !(v >= min))
    fail<ValueError>("bench_attention: {} expects a number >= {}, got '{}'", option, min, s);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 0;
  bool causal = false, throughput = false, bf16 = false, blas_too = false;
  std::string path = "kernel";
  int steps = 0, reps = 3;
  double memory_gib = 20;
  std::vector<int64_t> lengths = {4096, 8192};
  CLI::App app("bench_attention: the fused attention kernel at one length (--n), or its throughput (--throughput)");
  app.add_option("--n", n, "sequence length N")->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_flag("--causal", causal, "causal attention");
  app.add_option("--path", path, "the kernel alone or the mha module around it")
      ->check(CLI::IsMember({"kernel", "module"}));
  app.add_option("--steps", steps, "timed forward + backward steps (default by N)")->check(CLI::Range(1, 100000));
  app.add_option("--memory-limit", memory_gib, "GiB the process may use")->check(CLI::Range(0.25, 4096.0));
  app.add_flag("--throughput", throughput, "GFLOP/s of the kernel against cblas_sgemm");
  app.add_flag("--blas-too", blas_too, "with --throughput: also time the kernel on cblas_sgemm, repetitions alternating");
  app.add_flag("--bf16", bf16, "GFLOP/s of the kernel in float32 and in bf16 under autocast, alternating");
  app.add_option("--lengths", lengths, "lengths of --throughput, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  app.add_option("--reps", reps, "repetitions of --throughput and --bf16")->check(CLI::Range(1, 100000));
  app.add_option("--batch", g_batch, "batch size B (default 1)")->check(CLI::Range(int64_t(1), int64_t(4096)));
  app.add_option("--head-size", g_head_size, "dk = dv per head (default 64)")->check(CLI::Range(int64_t(1), int64_t(4096)));
  app.add_option("--q-tile", g_tiles.q_tile, "the kernel path's query rows per tile")->check(CLI::Range(1, 4096));
  app.add_option("--k-tile", g_tiles.k_tile, "the kernel path's key rows per tile")->check(CLI::Range(1, 4096));
  bench::parse_or_exit(app, argc, argv);
  try {
    if (throughput) return run_throughput(lengths, reps, blas_too);
    if (bf16) return run_bf16(lengths, reps, causal);
    if (n == 0) {
      std::fprintf(stderr, "bench_attention: --n N or --throughput is required\n%s", app.help().c_str());
      return 2;
    }
    return run_one(path, n, causal, steps ? steps : default_steps(n), memory_gib);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "bench_attention: out of memory\n");
    return kOomExit;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());  // the message names the program
    return 1;
  }
}

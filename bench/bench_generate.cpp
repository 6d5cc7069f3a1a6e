// bench_generate: sampling speed of the reference causal LM (bench/reference_lm.hpp: 4 layers,
// d=256, 8 heads, vocabulary 256; max_len 512) in attnlab: batch 1, a 1-token prompt,
// temperature 1, with each variant's decoding cache (KV cache, rolling window, recurrent state)
// and without it (the whole sequence recomputed for every new token). bench/torch_generate.py does the same in PyTorch with
// hand-written layers and caches; bench/run_generate.sh runs both, variant by variant, and
// prints the ratios.
//
//   bench_generate [TOKENS [REPS [UNCACHED_TOKENS [SPEC...]]]]
//     TOKENS           new tokens per cached run (255)
//     REPS             cached runs; the median is kept (3). No separate warm-up run: the first
//                      run fills the allocator's cache and the median discards that one slow run
//     UNCACHED_TOKENS  new tokens of the one uncached run (255): its cost grows with the square
//                      of the length, so run_generate.sh passes fewer
//     SPEC...          attention specs (default: the seven variants with a decoding cache)
// Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnlab.hpp"
#include "bench/bench_args.hpp"
#include "bench/reference_lm.hpp"
#include "nn/generation.hpp"

using namespace attnlab;

namespace {

// Median tokens/s of `reps` runs of `model` generating `tokens` new tokens, cached or not.
double rate(nn::CausalLM& model, int64_t tokens, bool cache, int reps) {
  Tensor prompt = zeros({1, 1}, kInt64);  // (1, 1)
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    nn::generate(model, prompt, {.max_new_tokens = tokens, .temperature = 1.0, .seed = uint64_t(i), .use_cache = cache});
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return double(tokens) / t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 255, uncached_tokens = 0;
  int reps = 3;
  std::vector<std::string> specs;
  CLI::App app("bench_generate: sampling tokens/s of the reference causal LM, with and without a decoding cache");
  app.add_option("TOKENS", tokens, "new tokens per sample (the LM's context is 512)")->check(CLI::Range(1, 511));
  app.add_option("REPS", reps, "repetitions (the median is reported)")->check(CLI::Range(1, 10000));
  app.add_option("UNCACHED_TOKENS", uncached_tokens, "new tokens without a cache (default TOKENS)")
      ->check(CLI::Range(1, 511));
  app.add_option("SPEC", specs, "attention specs (default: seven variants with a decoding cache)");
  bench::parse_or_exit(app, argc, argv);
  if (uncached_tokens == 0) uncached_tokens = tokens;
  if (specs.empty())
    specs = {"mha(heads=8)",    "talking_heads(heads=8)",    "collaborative(heads=8)", "synthesizer(heads=8)",
             "local(window=64, heads=8)", "linear(heads=8)", "performer(heads=8)"};
  std::printf("{\"new_tokens\": %lld, \"uncached_new_tokens\": %lld, \"reps\": %d, \"threads\": %d, \"variants\": [",
              (long long)tokens, (long long)uncached_tokens, reps, num_threads());
  try {
    for (size_t i = 0; i < specs.size(); ++i) {
      manual_seed(0);
      nn::CausalLM model(bench::reference_lm(specs[i], 512));
      const double cached = rate(model, tokens, true, reps);
      const double uncached = rate(model, uncached_tokens, false, 1);
      std::printf("%s{\"attention\": \"%s\", \"cached_tokens_per_s\": %.1f, \"uncached_tokens_per_s\": %.1f}",
                  i ? ", " : "", specs[i].c_str(), cached, uncached);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nbench_generate: %s\n", e.what());
    return 1;
  }
  std::printf("]}\n");
  return 0;
}

// bench_generate: sampling speed of the reference causal LM (4 layers, d=256, 8 heads, vocabulary
// 256, max_len 512) in attnlab: batch 1, a 1-token prompt, 255 new tokens, temperature 1, with
// the KV cache and without it; then the same LM with talking_heads, local and linear attention,
// each with its decoding cache (KV cache, rolling window, recurrent state) and without (attnlab
// only). Prints JSON; bench/torch_generate.py does the mha runs in PyTorch (with a hand-written
// KV cache) and bench/run_generate.sh prints the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "attnlab.hpp"
#include "nn/generation.hpp"

using namespace attnlab;

int main(int argc, char** argv) {
  const int64_t new_tokens = argc > 1 ? std::atoll(argv[1]) : 255;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  Tensor prompt = zeros({1, 1}, kInt64);
  // Median tokens/s of `r` runs of `model`, cached or not.
  auto rate = [&](nn::CausalLM& model, bool cache, int r) {
    std::vector<double> t;
    for (int i = 0; i < r; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      nn::generate(model, prompt, {.max_new_tokens = new_tokens, .temperature = 1.0, .seed = uint64_t(i), .use_cache = cache});
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return double(new_tokens) / t[t.size() / 2];
  };
  // {cached, uncached} tokens/s of the reference LM with `attention` in every layer.
  auto measure = [&](const std::string& attention) {
    manual_seed(0);
    nn::LMConfig cfg;
    cfg.block.d_model = 256;
    cfg.block.attention = attention;
    cfg.layers = 4;
    cfg.vocab_size = 256;
    cfg.max_len = 512;
    nn::CausalLM model(cfg);
    rate(model, true, 1);  // warm-up
    const double cached = rate(model, true, reps);
    return std::pair{cached, rate(model, false, 1)};
  };
  const auto [cached, uncached] = measure("mha(heads=8)");
  std::printf("{\"cached_tokens_per_s\": %.1f, \"uncached_tokens_per_s\": %.1f, \"new_tokens\": %lld, \"threads\": %d, "
              "\"variants\": [",
              cached, uncached, (long long)new_tokens, num_threads());
  const char* variants[] = {"talking_heads(heads=8)", "local(window=64, heads=8)", "linear(heads=8)"};
  for (size_t i = 0; i < std::size(variants); ++i) {
    const auto [c, u] = measure(variants[i]);
    std::printf("%s{\"attention\": \"%s\", \"cached_tokens_per_s\": %.1f, \"uncached_tokens_per_s\": %.1f}",
                i ? ", " : "", variants[i], c, u);
    std::fflush(stdout);
  }
  std::printf("]}\n");
  return 0;
}

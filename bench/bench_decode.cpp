// bench_decode: generation at a long context with the attention of current models. Each variant's
// decoding cache is filled with CONTEXT positions (forward_step in chunks of CHUNK positions),
// then timed on steps of T = 1; steps of the variants are interleaved (one step of each in turn),
// so that every variant sees the same share of the machine's load.
//
//   bench_decode [--context 4096] [--steps 64] [--window 512] [--chunk 512] [--no-layer] [--no-lm]
//                [--lm-steps 32] [--variants SPEC;SPEC;...] [--d-model 512] [--csv FILE]
//
// Layer rows: one attention layer, D = 512 (--d-model), h = 8 and dk = dv = 64 in the default
// specs, batch 1, float32, eval mode. --csv writes the layer rows as a measured table for
// `attnlab report` (docs/sweeps.md, "Figures measured outside the sweep"): the spec, then
// cache_floats_per_token, cache_ratio, decode_tokens_per_s and decode_ratio.
//   cache B/token   numel() * 4 bytes / positions held for (the cache's length after the run)
//   alloc B/token   the allocator's bytes in use with the filled cache alive, minus before it was
//                   made, over the same positions (size-class rounding included)
//   step peak       the allocator's peak during one T = 1 step above the bytes in use before it
//                   (the step's temporaries), the largest over the timed steps
//   tokens/s        1 / the median time of a T = 1 step (after one untimed step)
//   ratios          memory: the variant's over mha's (< 1 is smaller); speed: over mha's (> 1 faster)
// LM rows: the reference LM (bench/reference_lm.hpp: 4 layers, d = 256, 8 heads, vocabulary 256,
// learned positions; max_len = context + steps) with the variant in every layer: the prompt
// prefilled in chunks, then each timed token is CausalLM::forward_step of one token plus
// sample_next, the loop nn::generate runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "bench/reference_lm.hpp"
#include "nn/attention/mla.hpp"
#include "nn/attention/registry.hpp"
#include "nn/generation.hpp"
#include "bench/bench_args.hpp"

using namespace attnlab;
using Clock = std::chrono::steady_clock;

namespace {


using attnlab::bench::median;

template <class F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  int64_t context = 4096, steps = 64, window = 512, chunk = 512, lm_steps = 32, d_model = 512;
  bool layer = true, lm = true;
  std::string csv;  // empty: no table written
  std::vector<std::string> variants;  // empty: the defaults below
};

std::vector<std::string> default_variants(int64_t window) {
  return {"mha(heads=8)",
          "mha(heads=8, kv_heads=2)",
          "mha(heads=8, kv_heads=1)",
          "mla(heads=8)",
          "mla(heads=8, absorb=false)",
          "retention(heads=8)",
          fmt::format("local(heads=8, window={}, sink_tokens=4)", window)};
}

// One attention layer with its filled cache and what was measured of it.
struct LayerRun {
  std::string spec;
  std::shared_ptr<nn::Attention> attn;
  std::unique_ptr<nn::AttentionCache> cache;
  int64_t held_bytes = 0;  // allocator bytes in use for the filled cache
  int64_t step_peak = 0;   // largest step transient
  std::vector<double> times;
};

// Fills `cache` with `context` positions of x (1, context, D) in chunks of `chunk`.
void prefill(nn::Attention& attn, nn::AttentionCache& cache, const Tensor& x, int64_t chunk) {
  for (int64_t s = 0; s < x.size(1); s += chunk) attn.forward_step(narrow(x, 1, s, std::min(chunk, x.size(1) - s)), cache);
}

// The layer rows as a measured table: the spec (quoted: specs hold commas), then the numbers.
void write_csv(const std::string& path, const std::vector<LayerRun>& runs) {
  auto per_token = [](const LayerRun& r) { return double(r.cache->numel()) / double(r.cache->length); };
  std::string text = "model.attention,cache_floats_per_token,cache_ratio,decode_tokens_per_s,decode_ratio\n";
  for (const LayerRun& r : runs)
    text += fmt::format("\"{}\",{:.2f},{:.4f},{:.1f},{:.3f}\n", r.spec, per_token(r), per_token(r) / per_token(runs[0]),
                        1 / median(r.times), median(runs[0].times) / median(r.times));
  write_text_atomic(path, text);
}

void bench_layers(const Options& o, const std::vector<std::string>& specs) {
  NoGradGuard no_grad;
  const int64_t max_len = o.context + o.steps + 1;  // every preallocated row is filled by the end
  Generator gen(1);
  Tensor x = randn({1, o.context, o.d_model}, gen);                   // (1, context, D)
  std::vector<Tensor> x_step;                                       // (1, 1, D) each
  for (int64_t s = 0; s <= o.steps; ++s) x_step.push_back(randn({1, 1, o.d_model}, gen));
  std::vector<LayerRun> runs;
  for (const std::string& spec : specs) {
    LayerRun r;
    r.spec = spec;
    manual_seed(0);
    r.attn = nn::make_attention(spec, o.d_model);
    r.attn->eval();
    const int64_t before = allocator_stats().bytes_in_use;
    r.cache = r.attn->make_cache(1, max_len);
    const double t = seconds([&] { prefill(*r.attn, *r.cache, x, o.chunk); });
    r.held_bytes = allocator_stats().bytes_in_use - before;
    r.attn->forward_step(x_step[0], *r.cache);  // untimed first step
    fmt::print(stderr, "prefilled {} in {:.2f} s\n", spec, t);
    runs.push_back(std::move(r));
  }
  for (int64_t s = 1; s <= o.steps; ++s)
    for (LayerRun& r : runs) {
      const int64_t before = allocator_stats().bytes_in_use;
      reset_peak_bytes();
      r.times.push_back(seconds([&] { r.attn->forward_step(x_step[s], *r.cache); }));
      r.step_peak = std::max(r.step_peak, allocator_stats().peak_bytes_in_use - before);
    }

  fmt::print("\n#### One attention layer: D={}, batch 1, float32, {} thread(s); context {} "
             "(prefilled in chunks of {}), median of {} steps of T=1, interleaved\n\n",
             o.d_model, num_threads(), o.context, o.chunk, o.steps);
  fmt::print("| spec | cache numel | cache B/token | ratio to mha | alloc B/token | step peak (MiB) | tokens/s | "
             "ratio to mha |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  const double mha_bpt = double(runs[0].cache->numel()) * 4 / double(runs[0].cache->length);
  const double mha_rate = 1 / median(runs[0].times);
  for (const LayerRun& r : runs) {
    const double positions = double(r.cache->length);
    const double bpt = double(r.cache->numel()) * 4 / positions;
    const double rate = 1 / median(r.times);
    fmt::print("| `{}` | {} | {:.1f} | {:.4f} | {:.1f} | {:.2f} | {:.0f} | {:.2f}x |\n", r.spec, r.cache->numel(), bpt,
               bpt / mha_bpt, double(r.held_bytes) / positions, double(r.step_peak) / (1 << 20), rate, rate / mha_rate);
  }
  fmt::print("\nratios against the first row (`{}`): memory, the variant's over it (< 1 smaller); speed, the "
             "variant's tokens/s over it (> 1 faster)\n",
             runs[0].spec);
  if (!o.csv.empty()) write_csv(o.csv, runs);
  for (const LayerRun& r : runs)
    if (auto* mla = dynamic_cast<const nn::LatentAttention*>(r.attn.get())) {
      // Against the KV cache of an mha with the same h, dk, dv: h (dk + dv) numbers per position.
      const nn::LatentConfig& c = mla->config;
      const int64_t mha_token = c.head.heads * (c.head.key_size + c.head.value_size);
      const double ratio = double(r.cache->numel()) / double(r.cache->length * mha_token);
      const double bound = double(c.kv_rank + c.rope_size) / double(mha_token);
      fmt::print("`{}`: cache / mha's cache of the same h, dk, dv = {:.5f}; bound (r + dr) / (h (dk + dv)) = "
                 "({} + {}) / ({} ({} + {})) = {:.5f}; ratio / bound = {:.3f}\n",
                 r.spec, ratio, c.kv_rank, c.rope_size, c.head.heads, c.head.key_size, c.head.value_size, bound,
                 ratio / bound);
    }
}

// The reference LM with `spec` in every layer, its cache filled with the prompt.
struct LMRun {
  std::string spec;
  std::unique_ptr<nn::CausalLM> model;
  nn::LMCache cache;
  Tensor next;  // (1, 1) the token to feed next
  std::vector<double> times;
};

void bench_lm(const Options& o, const std::vector<std::string>& specs) {
  NoGradGuard no_grad;
  Generator gen(2), sampler(3);
  Tensor prompt = randint(0, 256, {1, o.context}, gen);  // (1, context)
  std::vector<LMRun> runs;
  for (const std::string& spec : specs) {
    LMRun r;
    r.spec = spec;
    manual_seed(0);
    r.model = std::make_unique<nn::CausalLM>(bench::reference_lm(spec, o.context + o.lm_steps + 1));
    r.model->eval();
    r.cache = r.model->make_cache(1);
    Tensor logits;
    const double t = seconds([&] {
      for (int64_t s = 0; s < o.context; s += o.chunk)
        logits = r.model->forward_step(narrow(prompt, 1, s, std::min(o.chunk, o.context - s)), r.cache);
    });
    r.next = reshape(nn::sample_next(select(logits, 1, logits.size(1) - 1), 1.0, 0, sampler), {1, 1});
    fmt::print(stderr, "prefilled the LM with {} in {:.2f} s\n", spec, t);
    runs.push_back(std::move(r));
  }
  auto token = [&](LMRun& r) {  // one generated token: what nn::generate does per step
    Tensor logits = r.model->forward_step(r.next, r.cache);  // (1, 1, V)
    r.next = reshape(nn::sample_next(select(logits, 1, 0), 1.0, 0, sampler), {1, 1});
  };
  for (LMRun& r : runs) token(r);  // untimed first token
  for (int64_t s = 1; s < o.lm_steps; ++s)
    for (LMRun& r : runs) r.times.push_back(seconds([&] { token(r); }));

  fmt::print("\n#### Reference LM (4 layers, d=256, 8 heads, vocabulary 256), batch 1, {} thread(s): tokens/s at "
             "context {}, median of {} tokens (forward_step + sample_next), interleaved\n\n",
             num_threads(), o.context, o.lm_steps - 1);
  fmt::print("| spec | tokens/s | ratio to mha |\n|---|---:|---:|\n");
  const double mha_rate = 1 / median(runs[0].times);
  for (const LMRun& r : runs) {
    const double rate = 1 / median(r.times);
    fmt::print("| `{}` | {:.1f} | {:.2f}x |\n", r.spec, rate, rate / mha_rate);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("bench_decode: decoding steps of each variant's cache against recomputation, per layer and in the LM");
  bool no_layer = false, no_lm = false;
  app.add_option("--context", o.context, "positions decoded")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--steps", o.steps, "timed steps per position")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--window", o.window, "local's window")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--chunk", o.chunk, "positions per chunked step")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--lm-steps", o.lm_steps, "LM tokens sampled (the first is not timed)")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app.add_option("--d-model", o.d_model, "layer width D")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--csv", o.csv, "also write the layer rows to FILE");
  app.add_flag("--no-layer", no_layer, "skip the per-layer table");
  app.add_flag("--no-lm", no_lm, "skip the LM table");
  app.add_option("--variants", o.variants, "attention specs, ';'-separated")->delimiter(';');
  bench::parse_or_exit(app, argc, argv);
  o.layer = !no_layer;
  o.lm = !no_lm;
  o.variants.erase(std::remove(o.variants.begin(), o.variants.end(), std::string()), o.variants.end());
  const std::vector<std::string> specs = o.variants.empty() ? default_variants(o.window) : o.variants;
  try {
    if (o.layer) bench_layers(o, specs);
    if (o.lm) bench_lm(o, specs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}

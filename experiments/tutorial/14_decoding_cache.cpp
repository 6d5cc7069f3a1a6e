// Tutorial 14: decoding one token at a time with a cache (Attention::make_cache / forward_step,
// docs/attention.md "Incremental decoding"), and what the cache costs per token for mha, grouped
// keys and values (GQA, Ainslie et al. 2023; MQA, Shazeer 2019), mla's latent (DeepSeek-V2) and
// retention's fixed recurrent state (RetNet). The equality checks run in float64; the cache sizes
// are those of a float32 model.
#include <memory>

#include "experiments/tutorial/tutorial.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using tutorial::check;
using tutorial::say;

namespace {

constexpr int64_t kD = 64, kN = 10;  // model width, tokens decoded

void step_equals_forward() {
  tutorial::section("forward_step equals the causal forward, token by token");
  say("A causal model's output at position n depends on tokens 0..n only, so generating token n+1\n"
      "needs only the new row of each layer. What the new row reads of the past are the keys and\n"
      "values of tokens 0..n: the layer keeps them in a cache instead of recomputing them. Below,\n"
      "each layer consumes 10 tokens one at a time and every output row is compared with the\n"
      "causal forward over all 10 tokens at once.");
  Generator gen(14);
  Tensor x = randn({1, kN, kD}, gen, kFloat64);  // (B, N, D)
  for (const char* spec : {"mha(heads=8)", "mha(heads=8, kv_heads=2)", "mla(heads=8, kv_rank=16, rope_size=4)",
                           "retention(heads=8)"}) {
    auto attn = nn::make_attention(spec, kD);
    attn->to(kFloat64);
    attn->eval();
    Tensor full;
    {
      NoGradGuard no_grad;
      full = attn->forward(x, {}, {}, /*causal=*/true).output;  // (1, N, D)
    }
    auto cache = attn->make_cache(1, kN);
    double worst = 0;
    for (int64_t n = 0; n < kN; ++n) {
      Tensor row = attn->forward_step(narrow(x, 1, n, 1), *cache);  // (1, 1, D)
      worst = std::max(worst, tutorial::max_abs_diff(row, narrow(full, 1, n, 1)));
    }
    fmt::print("{:<40} max |step - forward| over {} steps = {:.1e}\n", attn->spec(), kN, worst);
    check(worst < 1e-12, fmt::format("{}: forward_step equals the causal forward to 1e-12", spec));
  }
}

struct CacheCase {
  std::string spec;
  std::string formula;     // the cache's numbers per token, in the layer's sizes
  int64_t per_token;       // that formula evaluated; 0 for a fixed-size state
  int64_t fixed;           // numbers of a fixed-size state, independent of the length
};

void cache_sizes() {
  tutorial::section("cache bytes per token");
  say("mha caches a key and a value of every head: 2 h dk numbers per token per layer. Grouped-query\n"
      "attention (kv_heads = g) lets groups of h/g query heads share one key/value head: 2 g dk.\n"
      "kv_heads = 1 is multi-query attention. mla caches one latent c of size r and one RoPE key of\n"
      "size dr shared by every head, r + dr numbers, and (absorbed decoding) never expands them back\n"
      "to per-head keys. retention keeps no per-token cache at all: a state S (dk, dv) per head,\n"
      "the same size at token 10 and at token 10 million. Sizes for D = 64, h = 8, dk = dv = 8,\n"
      "float32 (4 bytes), measured as cache->numel() of a cache made for max_len = 1024 positions.");
  const int64_t h = 8, dk = 8, max_len = 1024;
  const std::vector<CacheCase> cases = {
      {"mha(heads=8)", "2 h dk", 2 * h * dk, 0},
      {"mha(heads=8, kv_heads=2)", "2 g dk, g = 2", 2 * 2 * dk, 0},
      {"mha(heads=8, kv_heads=1)", "2 g dk, g = 1", 2 * 1 * dk, 0},
      {"mla(heads=8, kv_rank=16, rope_size=4)", "r + dr", 16 + 4, 0},
      {"retention(heads=8)", "h dk dv (fixed)", 0, h * dk * dk},
  };
  fmt::print("{:<40} {:>16} {:>16} {:>12}\n", "layer", "formula", "bytes per token", "vs mha");
  for (const CacheCase& c : cases) {
    auto attn = nn::make_attention(c.spec, kD);
    attn->eval();
    auto cache = attn->make_cache(1, max_len);
    const int64_t numel = cache->numel();
    if (c.per_token > 0) {
      const int64_t bytes = numel / max_len * 4;
      fmt::print("{:<40} {:>16} {:>16} {:>11.3f}x\n", c.spec, c.formula, bytes, double(c.per_token) / (2 * h * dk));
      check(numel == c.per_token * max_len,
            fmt::format("{}: the cache holds {} = {} numbers per token", c.spec, c.formula, c.per_token));
    } else {
      fmt::print("{:<40} {:>16} {:>16} {:>12}\n", c.spec, c.formula, fmt::format("0 (+{} fixed)", numel * 4), "-");
      check(numel == c.fixed, fmt::format("{}: the state holds {} = {} numbers whatever the length", c.spec,
                                          c.formula, c.fixed));
    }
  }
  say("Per decoded token a step must read the whole cache, so at long lengths the cache, not the\n"
      "arithmetic, sets the speed: mla reads 20 numbers per past token where mha reads 128. Its full\n"
      "forward costs a little more than mha's (`attnlab explain mla --d-model 64 --seq 128`), and its\n"
      "absorbed step scores against the latent, about twice mha's arithmetic here (r = 16 > dk = 8);\n"
      "what it saves is the cache every step reads: `attnlab explain mla --d-model 64 --decode 4096`\n"
      "traces one step against a 4096-token cache, with the cache bytes next to mha's (docs/cli.md).");
}

void lesson() {
  say("Generating text runs the model once per new token. Recomputing every earlier position each\n"
      "time would cost O(N^2) per token; a decoding cache keeps what the past contributes so a step\n"
      "costs O(N). This lesson checks that the cached step is exact and measures what the cache\n"
      "costs per token for the variants built to shrink it.");
  step_equals_forward();
  cache_sizes();
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Tutorial 14: decoding with a cache, and what the cache costs per token.", lesson);
}

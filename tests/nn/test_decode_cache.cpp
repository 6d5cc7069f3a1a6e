// The decoding caches of the variants that override Attention::forward_step (talking_heads,
// collaborative, synthesizer, local, linear, performer, mla on both decoding paths, diff,
// retention; mha is in test_generation.cpp): each step's rows equal the causal forward's, the
// cache stays the size the docs give, and cached generation picks the same tokens as full
// recomputation.
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn_testing.hpp"
#include "nn/attention/registry.hpp"
#include "nn/generation.hpp"
#include "nn/transformer.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Variant specs for d_model = 8 without the closing parenthesis; the tests add the head options.
const std::vector<std::string> kVariants = {
    "talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=2",
    "talking_heads(heads=2, pre=false, post=false",
    "collaborative(heads=2, shared_key_size=5",
    "synthesizer(parts=dense+random+fixed_random+factorized_dense+factorized_random+vanilla, max_len=12, hidden=3, "
    "factor=2, heads=2",
    "synthesizer(parts=factorized_dense, max_len=12, hidden=3, heads=2",
    "synthesizer(parts=vanilla, max_len=12, heads=2",
    "local(window=2, heads=2",
    "linear(heads=2",
    "performer(heads=2, features=6",
    "mla(heads=2, kv_rank=3",
    "mla(heads=2, kv_rank=3, q_rank=4, absorb=false",
    "diff(heads=2, key_size=3, value_size=3",
    "retention(heads=2, key_size=3, chunk=3",
};

// Random gate parameters, so that every head gets another eval-mode gate value.
void randomise_gates(nn::Attention& attn, Generator& gen) {
  NoGradGuard no_grad;
  for (auto& [name, t] : attn.state_dict())
    if (name.find("log_alpha") != std::string::npos) {
      Tensor dst = t;
      kernels::copy_(dst, randn(t.shape(), gen, t.dtype()));
    }
}

}  // namespace

TEST_CASE("forward_step in chunks of 1, 3, 1, 2 positions equals the causal forward for every cached variant") {
  for (const std::string& base : kVariants) {
    for (const char* extra : {", bias=false, gate=hard_concrete)", ")"}) {
      for (DType dt : {kFloat64, kFloat32}) {
        std::string spec = base + extra;
        if (base.rfind("mla", 0) == 0 && spec.find("bias=false") != std::string::npos)
          spec = base + ", gate=hard_concrete)";  // mla has no biases to remove
        CAPTURE(spec);
        CAPTURE(dtype_name(dt));
        manual_seed(11);
        auto attn = nn::make_attention(spec, 8);
        Generator gen(12);
        randomise_gates(*attn, gen);
        attn->to(dt);
        attn->eval();
        Tensor x = randn({2, 7, 8}, gen, dt) * 2.0;          // (2, 7, 8); larger inputs move performer's key shift
        Tensor want = attn->forward(x, {}, {}, true).output;  // (2, 7, 8)
        auto cache = attn->make_cache(2, 12);
        const int64_t first_numel = cache->numel();
        std::vector<Tensor> parts;
        int64_t at = 0;
        for (int64_t t : {1, 3, 1, 2}) {
          parts.push_back(attn->forward_step(narrow(x, 1, at, t), *cache));
          at += t;
        }
        CHECK(cache->length == 7);
        const double tol = dt == kFloat64 ? 1e-10 : 1e-4;
        CHECK(allclose(cat(parts, 1), want, tol, tol));
        // The variant's own cache, not the default's growing copy of the inputs: preallocated or
        // recurrent state keeps its size; local's window holds window = 2 positions.
        if (base.rfind("local", 0) == 0)
          CHECK(cache->numel() == 2 * 2 * 2 * (4 + 4));
        else
          CHECK(cache->numel() == first_numel);
        CHECK(cache->numel() > 0);
      }
    }
  }
}

TEST_CASE("local's decoding cache holds the last `window` positions only") {
  manual_seed(1);
  auto attn = nn::make_attention("local(window=3, heads=2, key_size=5, value_size=3)", 8);
  attn->eval();
  Generator gen(2);
  Tensor x = randn({1, 40, 8}, gen);  // (1, 40, 8)
  auto cache = attn->make_cache(1, 4);  // local needs no max_len: the window bounds the cache
  CHECK(cache->numel() == 0);
  for (int64_t n = 0; n < 40; ++n) {
    attn->forward_step(narrow(x, 1, n, 1), *cache);
    CHECK(cache->numel() == 1 * 2 * std::min<int64_t>(n + 1, 3) * (5 + 3));  // B h min(length, w) (dk + dv)
  }
  Tensor want = narrow(attn->forward(x, {}, {}, true).output, 1, 39, 1);  // (1, 1, 8)
  auto again = attn->make_cache(1, 0);
  attn->forward_step(narrow(x, 1, 0, 39), *again);
  CHECK(allclose(attn->forward_step(narrow(x, 1, 39, 1), *again), want, 1e-5, 1e-5));
}

TEST_CASE("local with sinks decodes in constant memory: the sinks and the window, each step the causal forward") {
  // window w = 3, s = 2 sinks: 3 w + s = 11 positions and more, one at a time, in float64
  manual_seed(3);
  auto attn = nn::make_attention("local(window=3, sink_tokens=2, heads=2, key_size=5, value_size=3)", 8);
  attn->to(kFloat64);
  attn->eval();
  Generator gen(4);
  const int64_t steps = 3 * 3 + 2 + 4;
  Tensor x = randn({2, steps, 8}, gen, kFloat64);  // (2, steps, 8)
  auto cache = attn->make_cache(2, 4);             // max_len 4 < steps: not needed
  for (int64_t n = 0; n < steps; ++n) {
    CAPTURE(n);
    Tensor y = attn->forward_step(narrow(x, 1, n, 1), *cache);                           // (2, 1, 8)
    Tensor want = narrow(attn->forward(narrow(x, 1, 0, n + 1), {}, {}, true).output, 1, n, 1);  // (2, 1, 8)
    CHECK(allclose(y, want, 1e-10, 1e-12));
    // B h min(length, s + w) (dk + dv): the numbers stop growing once the sinks and the window are full
    CHECK(cache->numel() == 2 * 2 * std::min<int64_t>(n + 1, 2 + 3) * (5 + 3));
  }
  // chunks that straddle the sinks and the window give the same rows
  Tensor want = attn->forward(x, {}, {}, true).output;  // (2, steps, 8)
  auto chunked = attn->make_cache(2, 0);
  std::vector<Tensor> rows;
  int64_t at = 0;
  for (int64_t t : {1, 4, 2, 5, 3}) {
    rows.push_back(attn->forward_step(narrow(x, 1, at, t), *chunked));
    at += t;
  }
  CHECK(at == steps);
  CHECK(allclose(cat(rows, 1), want, 1e-10, 1e-12));
  CHECK(chunked->numel() == cache->numel());
}

TEST_CASE("forward_step errors of the cached variants") {
  manual_seed(0);
  Generator gen(3);
  SUBCASE("synthesizer beyond max_len names the option and the sizes") {
    auto attn = nn::make_attention("synthesizer(parts=random, max_len=4, heads=2)", 8);
    attn->eval();
    auto cache = attn->make_cache(1, 10);
    attn->forward_step(randn({1, 3, 8}, gen), *cache);
    const std::string e = error_of([&] { attn->forward_step(randn({1, 2, 8}, gen), *cache); });
    CHECK(e.find("5 positions exceed max_len=4") != std::string::npos);
    CHECK(cache->length == 3);
  }
  SUBCASE("a cache made by another layer of the same kind, a wrong batch, train mode") {
    auto a = nn::make_attention("talking_heads(heads=2)", 8), b = nn::make_attention("talking_heads(heads=2)", 8);
    auto lin = nn::make_attention("linear(heads=2)", 8);
    a->eval();
    b->eval();
    lin->eval();
    auto ca = a->make_cache(1, 4), cl = lin->make_cache(1, 4);
    CHECK(error_of([&] { b->forward_step(randn({1, 1, 8}, gen), *ca); }).find("another layer") != std::string::npos);
    CHECK(error_of([&] { lin->forward_step(randn({2, 1, 8}, gen), *cl); }).find("batch 2 but the cache was made for 1") !=
          std::string::npos);
    lin->train();
    CHECK(error_of([&] { lin->forward_step(randn({1, 1, 8}, gen), *cl); }).find("eval()") != std::string::npos);
  }
}

TEST_CASE("cached and uncached generation produce identical tokens for every cached variant") {
  for (const std::string& base : kVariants) {
    std::string spec = base + ", gate=hard_concrete)";
    // The LM below has d_model 16 and max_len 24: the synthesizers need max_len >= 24.
    if (auto at = spec.find("max_len=12"); at != std::string::npos) spec.replace(at, 10, "max_len=24");
    for (double temperature : {0.0, 1.0}) {
      CAPTURE(spec);
      CAPTURE(temperature);
      manual_seed(8);
      nn::CausalLM lm(small_lm(spec));
      auto [prompt, cached, uncached] =
          generate_cached_and_uncached(lm, {.max_new_tokens = 20, .temperature = temperature, .top_k = 5, .seed = 42});
      CHECK(cached.shape() == Dims{2, 23});
      CHECK(cached.to_vector<int64_t>() == uncached.to_vector<int64_t>());
    }
  }
}

// What each variant declares (docs/attention.md, "What a variant declares"): a variant declaring
// decoding steps through forward_step as its causal forward runs; one declaring none refuses the
// first step with an attnlab error naming it.
TEST_CASE("forward_step follows each registered variant's declared decoding capability") {
  const int64_t D = 8, N = 16;  // bigbird, lsh and sinkhorn need a multiple of their block
  Generator gen(71);
  Tensor x = randn({2, N, D}, gen);
  int64_t decoding = 0;
  for (const auto& v : nn::variants()) {
    const std::string name = v.schema.name;
    if (v.schema.capabilities.decoding == nn::Support::probe) continue;  // variants registered by other tests
    CAPTURE(name);
    std::shared_ptr<nn::Attention> attn;
    try {
      attn = nn::make_attention(name == "lsh" ? "lsh(heads=2, chunk=4)" : name + "(heads=2)", D);
    } catch (const ValueError&) {
      attn = nn::make_attention(name, D);  // no heads option (fnet, mixer)
    }
    attn->eval();
    if (v.schema.capabilities.decoding == nn::Support::no) {
      const std::string e = error_of([&] {
        auto cache = attn->make_cache(2, N);
        attn->forward_step(narrow(x, 1, 0, 1), *cache);
      });
      CHECK(e.find(name) != std::string::npos);
      continue;
    }
    auto cache = attn->make_cache(2, N);
    Tensor first = attn->forward_step(narrow(x, 1, 0, 1), *cache);  // (2, 1, D)
    Tensor next = attn->forward_step(narrow(x, 1, 1, 2), *cache);   // (2, 2, D)
    Tensor want = attn->forward(narrow(x, 1, 0, 3), {}, {}, true).output;  // (2, 3, D)
    CHECK(allclose(cat({first, next}, 1), want, 1e-4, 1e-5));
    ++decoding;
  }
  CHECK(decoding > 0);
}

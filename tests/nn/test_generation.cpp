// Incremental decoding (Attention::forward_step, CausalLM::forward_step) and sampling
// (nn::generate, nn::sample_next).
#include <limits>

#include "helpers.hpp"
#include "nn_testing.hpp"
#include "nn/attention/registry.hpp"
#include "nn/generation.hpp"
#include "nn/transformer.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

}  // namespace

TEST_CASE("forward_step in pieces equals the causal forward, with the mha KV cache and the recomputing default") {
  for (const char* spec : {"mha(heads=2, key_size=3, gate=hard_concrete)", "dilated(window=1, dilation=2, heads=2)"}) {
    CAPTURE(spec);
    manual_seed(3);
    auto attn = nn::make_attention(spec, 8);
    attn->to(kFloat64);
    attn->eval();
    Generator gen(4);
    Tensor x = randn({2, 6, 8}, gen, kFloat64);
    Tensor want = attn->forward(x, {}, {}, true).output;  // (2, 6, 8)
    auto cache = attn->make_cache(2, 10);
    std::vector<Tensor> parts;
    int64_t at = 0;
    for (int64_t t : {3, 1, 2}) {
      parts.push_back(attn->forward_step(narrow(x, 1, at, t), *cache));
      at += t;
    }
    CHECK(cache->length == 6);
    CHECK(allclose(cat(parts, 1), want, 1e-12, 1e-12));
  }
}

TEST_CASE("forward_step errors: train mode, a foreign cache, a full cache, a wrong batch") {
  manual_seed(0);
  auto mha = nn::make_attention("mha(heads=2)", 8);
  auto th = nn::make_attention("talking_heads(heads=2)", 8);
  Generator gen(1);
  Tensor x = randn({1, 3, 8}, gen);
  auto cache = mha->make_cache(1, 4);
  CHECK(error_of([&] { mha->forward_step(x, *cache); }).find("eval()") != std::string::npos);
  mha->eval();
  th->eval();
  CHECK(error_of([&] { th->forward_step(x, *cache); }).find("another layer") != std::string::npos);
  mha->forward_step(x, *cache);
  CHECK(error_of([&] { mha->forward_step(x, *cache); }).find("exceed the cache's max_len 4") != std::string::npos);
  auto c2 = mha->make_cache(2, 4);
  CHECK(error_of([&] { mha->forward_step(x, *c2); }).find("batch 1") != std::string::npos);
}

TEST_CASE("CausalLM forward_step equals the last rows of forward") {
  manual_seed(5);
  nn::CausalLM lm(small_lm("mha(heads=2)"));
  lm.to(kFloat64);
  lm.eval();
  Generator gen(6);
  Tensor tokens = randint(0, 11, {3, 9}, gen);
  Tensor want = lm.forward(tokens);  // (3, 9, 11)
  nn::LMCache cache = lm.make_cache(3);
  Tensor a = lm.forward_step(narrow(tokens, 1, 0, 5), cache);
  Tensor b = lm.forward_step(narrow(tokens, 1, 5, 1), cache);
  Tensor c = lm.forward_step(narrow(tokens, 1, 6, 3), cache);
  CHECK(cache.length == 9);
  CHECK(allclose(cat({a, b, c}, 1), want, 1e-12, 1e-12));
  CHECK(error_of([&] { lm.forward_step(randint(0, 11, {3, 16}, gen), cache); }).find("exceed max_len 24") !=
        std::string::npos);
}

TEST_CASE("CausalLM without positions decodes past max_len where the caches allow it (local with sinks)") {
  nn::LMConfig c = small_lm("local(window=3, sink_tokens=2, heads=2)");  // max_len 24
  c.positions = "none";
  manual_seed(5);
  nn::CausalLM lm(c);
  lm.to(kFloat64);
  lm.eval();
  Generator gen(6);
  Tensor tokens = randint(0, 11, {2, 3 * 24}, gen);  // (2, 72): three times max_len
  Tensor want = lm.forward(tokens);                  // (2, 72, 11)
  nn::LMCache cache = lm.make_cache(2);
  std::vector<Tensor> rows;
  int64_t numel = 0;
  for (int64_t n = 0; n < 72; ++n) {
    rows.push_back(lm.forward_step(narrow(tokens, 1, n, 1), cache));
    if (n == 4) numel = cache.layers[0]->numel();  // sinks and window full after 2 + 3 positions
    if (n > 4) CHECK(cache.layers[0]->numel() == numel);
  }
  CHECK(numel == 2 * 2 * (2 + 3) * (8 + 8));  // B h (s + w) (dk + dv)
  CHECK(allclose(cat(rows, 1), want, 1e-10, 1e-12));
  // generation too: 40 new tokens after a 3-token prompt, cached equal to uncached
  nn::GenerateOptions o{.max_new_tokens = 40, .temperature = 1.0, .seed = 7};
  auto [prompt, cached, uncached] = generate_cached_and_uncached(lm, o);
  CHECK(cached.shape() == Dims{2, 43});
  CHECK(cached.to_vector<int64_t>() == uncached.to_vector<int64_t>());
  // mha's KV cache still stops at max_len, naming it; learned positions stop the LM itself
  nn::LMConfig m = small_lm("mha(heads=2)");
  m.positions = "none";
  nn::CausalLM mha_lm(m);
  mha_lm.eval();
  nn::LMCache mc = mha_lm.make_cache(2);
  mha_lm.forward_step(narrow(tokens, 1, 0, 20), mc);
  CHECK(error_of([&] { mha_lm.forward_step(narrow(tokens, 1, 20, 5), mc); }).find("exceed the cache's max_len 24") !=
        std::string::npos);
  nn::CausalLM learned(small_lm("local(window=3, sink_tokens=2, heads=2)"));
  CHECK(error_of([&] { nn::generate(learned, narrow(tokens, 1, 0, 3), o); }).find("exceeds the model's max_len 24") !=
        std::string::npos);
}

TEST_CASE("cached and uncached generation produce identical tokens") {
  for (const char* spec : {"mha(heads=4)", "talking_heads(heads=2)"}) {
    for (double temperature : {0.0, 1.0}) {
      CAPTURE(spec);
      CAPTURE(temperature);
      manual_seed(8);
      nn::CausalLM lm(small_lm(spec));
      nn::GenerateOptions o{.max_new_tokens = 20, .temperature = temperature, .top_k = 5, .seed = 42};
      auto [prompt, cached, uncached] = generate_cached_and_uncached(lm, o);
      CHECK(cached.shape() == Dims{2, 23});
      CHECK(cached.to_vector<int64_t>() == uncached.to_vector<int64_t>());
      CHECK(lm.is_training());  // the mode is restored
      // the prompt is kept, and another seed gives other tokens when sampling
      CHECK(narrow(cached, 1, 0, 3).to_vector<int64_t>() == prompt.to_vector<int64_t>());
      o.seed = 43;
      if (temperature > 0) CHECK(nn::generate(lm, prompt, o).to_vector<int64_t>() != uncached.to_vector<int64_t>());
    }
  }
}

TEST_CASE("sample_next: greedy, top-k and the sampling distribution") {
  Generator gen(0);
  Tensor logits = t64({0.0, std::log(3.0), -1.0, -50.0, 0.5, 0.2}, {2, 3});
  CHECK(nn::sample_next(logits, 0.0, 0, gen).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(nn::sample_next(logits, 1.0, 1, gen).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  // Row 0 with top_k = 2: tokens 0 and 1 with probabilities 1/4 and 3/4; token 2 never.
  Tensor row = t64({0.0, std::log(3.0), -1.0}, {1, 3});
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 4000; ++i) ++counts[nn::sample_next(row, 1.0, 2, gen).to_vector<int64_t>()[0]];
  CHECK(counts[2] == 0);
  CHECK(std::abs(counts[1] / 4000.0 - 0.75) < 0.03);  // ~4.5 standard deviations
  CHECK(error_of([&] { nn::sample_next(row, -1.0, 0, gen); }).find("temperature") != std::string::npos);
  CHECK(error_of([&] { nn::sample_next(t64({1}, {1}), 1.0, 0, gen); }).find("(B, V)") != std::string::npos);
}

TEST_CASE("generate rejects a prompt that does not fit") {
  manual_seed(0);
  nn::CausalLM lm(small_lm("mha(heads=2)"));
  Tensor prompt = zeros({1, 20}, kInt64);
  nn::GenerateOptions o{.max_new_tokens = 5};
  CHECK(error_of([&] { nn::generate(lm, prompt, o); }).find("exceeds the model's max_len 24") != std::string::npos);
  CHECK(error_of([&] { nn::generate(lm, zeros({1, 0}, kInt64), o); }).find("P >= 1") != std::string::npos);
}

TEST_CASE("sample_next and generate: a NaN or infinite logit is an error naming the row, the token and the step") {
  Generator gen(0);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double temperature : {0.0, 1.0}) {
    CAPTURE(temperature);
    CHECK(error_of([&] { nn::sample_next(t64({0, 1, 2, 3, nan, 5}, {2, 3}), temperature, 0, gen); })
              .find("sample_next: the logit of token 1 in row 1 is nan") != std::string::npos);
    CHECK(error_of([&] { nn::sample_next(t64({inf, 1}, {1, 2}), temperature, 0, gen); })
              .find("the logit of token 0 in row 0 is inf") != std::string::npos);
  }
  // Finite weights, but an output head so large that float32 logits overflow.
  manual_seed(0);
  nn::CausalLM lm(small_lm("mha(heads=2)"));
  TensorMap w = lm.state_dict();
  w["lm_head.weight"] = full(w.at("lm_head.weight").shape(), 3e38);
  lm.load_state_dict(w);
  Tensor prompt = zeros({1, 2}, kInt64);
  for (bool use_cache : {true, false}) {
    CAPTURE(use_cache);
    nn::GenerateOptions o{.max_new_tokens = 3, .use_cache = use_cache};
    const std::string err = error_of([&] { nn::generate(lm, prompt, o); });
    CHECK(err.find("generate: step 1 of 3 (position 2): the logit of token") != std::string::npos);
    CHECK(err.find("the model's output is not finite") != std::string::npos);
  }
}

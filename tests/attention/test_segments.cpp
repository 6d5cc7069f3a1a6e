// Packed sequences (docs/attention.md, "Packed sequences"): Attention::forward_packed with segment
// ids equals the same documents run one by one (mha with its options, mla, diff and the positional
// patterns on the fused kernel; talking_heads and collaborative through the default segment mask),
// equals forward with the dense segment mask in output and gradients, passes gradcheck, and every
// registered variant either takes segment ids or rejects them with a ValueError naming it.

#include "autograd/grad_helpers.hpp"
#include "helpers.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::vector<std::vector<int64_t>> kDocs = {{3, 5, 1, 6}, {9, 6}};  // two rows of N = 15

// forward_packed over rows of documents equals forward over each document alone (float64).
void check_packed_equals_separate(const std::string& spec, bool causal) {
  CAPTURE(spec);
  CAPTURE(causal);
  const int64_t D = 8, N = 15;
  auto attn = nn::make_attention(spec, D);
  attn->to(kFloat64);
  attn->eval();
  Generator g(60);
  Tensor x = randn({2, N, D}, g, kFloat64);                                     // (B, N, D)
  Tensor packed = attn->forward_packed(x, segments_of(kDocs), {}, causal).output;  // (B, N, D)
  for (int64_t b = 0; b < 2; ++b) {
    int64_t start = 0;
    for (int64_t len : kDocs[b]) {
      Tensor doc = narrow(narrow(x, 0, b, 1), 1, start, len);  // (1, len, D)
      Tensor alone = attn->forward(doc, {}, {}, causal).output;
      CHECK(allclose(narrow(narrow(packed, 0, b, 1), 1, start, len), alone, 1e-9, 1e-10));
      start += len;
    }
  }
}

}  // namespace

TEST_CASE("packed rows equal the same documents run one by one: fused variants and the default mask path") {
  for (bool causal : {false, true}) {
    for (const std::string spec :
         {"mha(heads=2)", "mha(heads=4, kv_heads=2, alibi=true, rope=true, qk_norm=true, sinks=true, softcap=3)",
          "mha(heads=2, score=sigmoid, sigmoid_bias=-1.5)", "mha(heads=2, score=softpick)",
          "mla(heads=2, kv_rank=3)", "diff(heads=2, key_size=3, value_size=3)", "local(heads=2, window=2)",
          "dilated(heads=2, window=1, dilation=2)", "sparse_strided(heads=2, stride=3)",
          "talking_heads(heads=2, logit_heads=3)", "collaborative(heads=2, shared_key_size=5)"})
      check_packed_equals_separate(spec, causal);
  }
}

TEST_CASE("forward_packed equals forward with the dense segment mask, in output and gradients (mha, local, longformer)") {
  const int64_t D = 8, N = 15;
  const Tensor ids = segments_of(kDocs);
  Generator g(61);
  const Tensor user = lt(rand({2, 1, N, N}, g, kFloat64), 0.8);  // (B, 1, N, N)
  for (const std::string spec : {"mha(heads=4, kv_heads=2, alibi=true, sinks=true, attn_dropout=0.2)",
                                 "mha(heads=2, score=softpick)", "local(heads=2, window=3, sink_tokens=2)",
                                 "longformer(heads=2, window=2, dilation=2, global=0+9, separate_global=true)"})
    for (bool causal : {false, true}) {
      CAPTURE(spec);
      CAPTURE(causal);
      auto attn = nn::make_attention(spec, D);
      attn->to(kFloat64);
      Tensor x0 = randn({2, N, D}, g, kFloat64), go = randn({2, N, D}, g, kFloat64);
      auto run = [&](bool packed) {
        Tensor x = clone(x0).requires_grad_();
        attn->zero_grad();
        // the same dropout draws on both paths: the layer's generator restarted
        for (auto& [name, gen] : attn->named_generators()) gen->set_state(7, 0);
        Tensor y = packed ? attn->forward_packed(x, ids, user, causal).output
                          : attn->forward(x, {}, nn::segment_mask(ids, user), causal).output;
        sum(y * go).backward();
        std::vector<Tensor> r = {y, x.grad()};
        for (auto& p : attn->parameters())
          if (p.grad().defined()) r.push_back(clone(p.grad()));
        return r;
      };
      auto a = run(true), b = run(false);
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(allclose(a[i], b[i], 1e-10, 1e-12));
    }
}

TEST_CASE("forward_packed gradcheck: fused mha with options, causal and a user mask (float64)") {
  const int64_t D = 8, N = 7;
  auto attn = nn::make_attention("mha(heads=2, kv_heads=1, alibi=true, rope=true, sinks=true)", D);
  attn->to(kFloat64);
  const Tensor ids = segments_of({{3, 4}, {1, 2, 4}});
  Generator g(62);
  const Tensor user = lt(rand({2, 1, N, N}, g, kFloat64), 0.8);
  Tensor x = leaf64({2, N, D}, 63);
  check_grad("mha packed", [&](const std::vector<Tensor>& in) { return attn->forward_packed(in[0], ids, user, true).output; },
             {x});
  auto diff = nn::make_attention("diff(heads=2, key_size=2, value_size=3)", D);
  diff->to(kFloat64);
  check_grad("diff packed", [&](const std::vector<Tensor>& in) { return diff->forward_packed(in[0], ids, {}, true).output; },
             {x});
}

TEST_CASE("need_weights with segment ids: probabilities are zero across segments and rows sum to one") {
  const int64_t D = 8, N = 15;
  const Tensor ids = segments_of(kDocs);
  for (const std::string spec : {"mha(heads=2)", "local(heads=2, window=4)", "mla(heads=2, kv_rank=3)"}) {
    CAPTURE(spec);
    auto attn = nn::make_attention(spec, D);
    Generator g(64);
    Tensor x = randn({2, N, D}, g);
    auto r = attn->forward_packed(x, ids, {}, false, true);
    REQUIRE(r.attention.defined());
    CHECK(allclose(r.output, attn->forward_packed(x, ids).output, 1e-5, 1e-6));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t n = 0; n < N; ++n) {
        double total = 0;
        for (int64_t m = 0; m < N; ++m) {
          const double p = r.attention.at({b, 1, n, m});
          total += p;
          if (ids.at({b, n}) != ids.at({b, m})) CHECK(p == 0.0);
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
      }
  }
}

TEST_CASE("every registered variant takes segment ids or, declaring none, rejects them with a ValueError naming it") {
  const int64_t D = 8, N = 16;  // bigbird needs a multiple of its block (16)
  const Tensor ids = segments_of({{6, 10}, {16}});
  Generator g(65);
  Tensor x = randn({2, N, D}, g);
  int64_t checked = 0;
  for (const auto& v : nn::variants()) {
    const std::string name = v.schema.name;
    CAPTURE(name);
    std::shared_ptr<nn::Attention> attn;
    try {
      attn = nn::make_attention(name == "lsh" ? "lsh(heads=2, chunk=4)" : name + "(heads=2)", D);
    } catch (const std::exception&) {
      attn = nn::make_attention(name, D);  // no heads option (fnet, mixer)
    }
    attn->eval();
    const nn::Capabilities& caps = v.schema.capabilities;
    const bool causal = caps.causal_only;
    if (caps.segments == nn::Support::no) {
      CHECK_THROWS_AS(attn->forward_packed(x, ids, {}, causal), ValueError);
      const std::string e = error_of([&] { attn->forward_packed(x, ids, {}, causal); });
      CHECK(e.rfind(name + ": segment_ids", 0) == 0);
    } else {
      Tensor y = attn->forward_packed(x, ids, {}, causal).output;  // (B, N, D)
      CHECK(y.shape() == Dims{2, N, D});
      for (double e : y.to_vector<double>()) CHECK(std::isfinite(e));
    }
    ++checked;
  }
  CHECK(checked == int64_t(nn::variants().size()));
}

TEST_CASE("forward_packed errors: segment_ids of the wrong dtype or shape, and a bad mask") {
  auto attn = nn::make_attention("mha(heads=2)", 8);
  Generator g(66);
  Tensor x = randn({2, 5, 8}, g);
  CHECK_THROWS_AS(attn->forward_packed(x, zeros({2, 5}, kFloat32)), DTypeError);
  CHECK(contains(error_of([&] { attn->forward_packed(x, zeros({2, 5}, kBool)); }),
                 "mha: segment_ids must be int64 (B=2, N=5), got dtype bool"));
  CHECK_THROWS_AS(attn->forward_packed(x, zeros({2, 6}, kInt64)), ShapeError);
  CHECK(contains(error_of([&] { attn->forward_packed(x, zeros({5}, kInt64)); }),
                 "mha: segment_ids must be (B=2, N=5), got shape (5)"));
  CHECK(contains(error_of([&] { attn->forward_packed(x, zeros({2, 5}, kInt64), zeros({2, 1, 5, 5}, kFloat32)); }),
                 "mask must be bool"));
  CHECK(allclose(attn->forward_packed(x, {}).output, attn->forward(x).output));  // undefined ids: the plain forward
  auto talking = nn::make_attention("talking_heads(heads=2)", 8);
  CHECK(contains(error_of([&] { talking->forward_packed(x, zeros({1, 5}, kInt64)); }),
                 "talking_heads: segment_ids must be (B=2, N=5), got shape (1,5)"));
}

// The example in docs/attention.md ("Packed sequences"), compiled and run.
TEST_CASE("packed sequences doc example") {
  auto attn = nn::make_attention("mha(heads=2, rope=true)", 8);
  Generator g(0);
  Tensor x = randn({1, 5, 8}, g);                                        // two documents of 2 and 3 tokens
  Tensor ids = from_vector<int64_t>({0, 0, 1, 1, 1}, {1, 5});           // (B, N)
  Tensor y = attn->forward_packed(x, ids, {}, /*causal=*/true).output;  // (1, 5, 8)
  Tensor second = attn->forward(narrow(x, 1, 2, 3), {}, {}, true).output;
  CHECK(allclose(narrow(y, 1, 2, 3), second, 1e-5, 1e-6));
}

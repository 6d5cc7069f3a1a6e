// local, sparse_strided, sparse_fixed, dilated (docs/attention.md, "local" to "dilated"): each
// against a dense twin that applies the documented rule written plainly, the identities (local with a
// window covering everything is mha), gradcheck for every option, pruning, dropout, the docs
// examples, linear memory, and the option errors.
#include <functional>

#include "efficient_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/patterns.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;

namespace {

using Rule = std::function<bool(int64_t n, int64_t m)>;

// The allowed rules, written plainly from docs/attention.md (independent of
// nn/attention/patterns.cpp).
Rule local_rule(int64_t w, int64_t sinks = 0) {
  return [=](int64_t n, int64_t m) { return std::abs(n - m) <= w || m < sinks; };
}
Rule strided_rule(int64_t l) {
  return [=](int64_t n, int64_t m) { return std::abs(n - m) < l || (n - m) % l == 0; };
}
Rule fixed_rule(int64_t l, int64_t c) {
  return [=](int64_t n, int64_t m) { return n / l == m / l || m % l >= l - c; };
}
Rule dilated_rule(int64_t w, int64_t d) {
  return [=](int64_t n, int64_t m) { return std::abs(n - m) <= w * d && (n - m) % d == 0; };
}

std::shared_ptr<nn::Attention> make64(const std::string& spec, int64_t d_model = 8, uint64_t seed = 7) {
  auto a = float64_layer(spec, d_model, seed);
  a->eval();
  return a;
}

nn::ProjectedAttention& projected(const std::shared_ptr<nn::Attention>& a) {
  return dynamic_cast<nn::ProjectedAttention&>(*a);
}

struct Twin {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, M)
};

// Dense masked softmax attention with plain loops over the layer's own weights: the allowed set
// is rule(n, m) && (m <= n if causal) && mask[b, h, n, m]. `dropout_seed` != 0 applies the
// kernel's counter-based dropout draws at `rate`.
Twin naive_pattern(nn::ProjectedAttention& a, const Tensor& x, const Tensor& ctx, const Tensor& mask, bool causal,
          const Rule& rule, double rate = 0, uint64_t dropout_seed = 0) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1);
  const int64_t h = a.config.heads, dk = a.config.key_size, dv = a.config.value_size;
  auto lin = [](const nn::Linear& l, const Tensor& in) {  // (B, T, in) -> (B, T, out)
    Tensor y = matmul(in, transpose(l.weight, 0, 1));
    return l.bias.defined() ? y + l.bias : y;
  };
  NoGradGuard no_grad;
  auto q = lin(*a.q_proj, x).to_vector<double>(), k = lin(*a.k_proj, ctx).to_vector<double>();
  auto v = lin(*a.v_proj, ctx).to_vector<double>();
  std::vector<bool> allowed_mask;
  if (mask.defined()) allowed_mask = contiguous(expand(mask, {B, h, N, M})).to_vector<bool>();
  auto g = reshape(nn::head_scale(a.gate, a.head_mask), {-1}).to_vector<double>();  // (h)
  std::vector<double> o(B * N * h * dv, 0.0), probs(B * h * N * M, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> s(M);
        double mx = -INFINITY;
        for (int64_t m = 0; m < M; ++m) {
          bool ok = rule(n, m) && (!causal || m <= n);
          if (mask.defined()) ok = ok && allowed_mask[((b * h + i) * N + n) * M + m];
          double acc = 0;
          for (int64_t d = 0; d < dk; ++d) acc += q[(b * N + n) * h * dk + i * dk + d] * k[(b * M + m) * h * dk + i * dk + d];
          s[m] = ok ? acc / std::sqrt(double(dk)) : -INFINITY;
          mx = std::max(mx, s[m]);
        }
        double z = 0;
        for (int64_t m = 0; m < M; ++m) z += s[m] == -INFINITY ? 0 : std::exp(s[m] - mx);
        for (int64_t m = 0; m < M; ++m) {
          const double p = (s[m] == -INFINITY || z == 0) ? 0 : std::exp(s[m] - mx) / z;
          probs[((b * h + i) * N + n) * M + m] = p;
          double pd = p;
          if (dropout_seed) pd = nn::tile_dropout_keep(dropout_seed, b, i, n, m, rate) ? p / (1 - rate) : 0;
          for (int64_t d = 0; d < dv; ++d)
            o[(b * N + n) * h * dv + i * dv + d] += pd * g[i] * v[(b * M + m) * h * dv + i * dv + d];
        }
      }
  return {lin(*a.out_proj, from_vector(o, {B, N, h * dv})), from_vector(probs, {B, h, N, M})};
}

struct VariantCase {
  std::string spec;
  Rule rule;
};

// Small options so that the patterns cut through short sequences.
std::vector<VariantCase> small_variants() {
  return {
      {"local(heads=2, window=2)", local_rule(2)},
      {"local(heads=2, window=1, key_size=3, value_size=5)", local_rule(1)},
      {"local(heads=2, window=1, sink_tokens=2)", local_rule(1, 2)},
      {"local(heads=2, window=2, sink_tokens=1)", local_rule(2, 1)},
      {"local(heads=2, window=1, sink_tokens=6)", local_rule(1, 6)},
      {"sparse_strided(heads=2, stride=3, causal=false)", strided_rule(3)},
      {"sparse_strided(heads=2, stride=1, causal=false)", strided_rule(1)},
      {"sparse_fixed(heads=2, block=4, summary=1, causal=false)", fixed_rule(4, 1)},
      {"sparse_fixed(heads=2, block=3, summary=3, causal=false)", fixed_rule(3, 3)},
      {"sparse_fixed(heads=2, block=5, summary=0, causal=false)", fixed_rule(5, 0)},
      {"dilated(heads=2, window=1, dilation=3)", dilated_rule(1, 3)},
      {"dilated(heads=2, window=2, dilation=1)", dilated_rule(2, 1)},
      // Strides and dilations far beyond N: the same rule, with O(N) bookkeeping.
      {"sparse_strided(heads=2, stride=2000000000, causal=false)", strided_rule(2000000000)},
      {"dilated(heads=2, window=1, dilation=2000000000)", dilated_rule(1, 2000000000)},
  };
}

// (B, 1, N, M) query-dependent mask, batch 1's query row 1 allowing nothing.
Tensor row_mask(int64_t B, int64_t N, int64_t M, uint64_t seed) {
  Generator g(seed);
  Tensor m = lt(rand({B, 1, N, M}, g, kFloat64), 0.8);
  std::vector<bool> v = m.to_vector<bool>();
  if (B > 1 && N > 1)
    for (int64_t j = 0; j < M; ++j) v[((1 * 1 + 0) * N + 1) * M + j] = false;
  return from_vector(v, {B, 1, N, M});
}

// (B, 1, 1, M) key padding: batch 0 pads its last key, batch 1 its last two.
Tensor padding_mask(int64_t B, int64_t M) {
  std::vector<bool> v(B * M, true);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = std::max<int64_t>(0, M - 1 - b); j < M; ++j) v[b * M + j] = false;
  return from_vector(v, {B, 1, 1, M});
}

}  // namespace

TEST_CASE("every pattern equals its dense-masked twin: self, cross, causal, masks (float64)") {
  for (const VariantCase& vc : small_variants()) {
    auto a = make64(vc.spec);
    auto& pa = projected(a);
    CAPTURE(vc.spec);
    Generator g(1);
    for (auto [N, M] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 7}, {13, 13}, {33, 33}, {9, 4}, {5, 17}}) {
      CAPTURE(N);
      CAPTURE(M);
      Tensor x = randn({2, N, 8}, g, kFloat64), ctx = randn({2, M, 8}, g, kFloat64);
      const bool self = N == M;
      Tensor c = self ? Tensor() : ctx;
      const Tensor& keys = self ? x : ctx;
      for (int masking = 0; masking < 3; ++masking)
        for (bool causal : {false, true}) {
          if (causal && !self) continue;
          CAPTURE(masking);
          CAPTURE(causal);
          Tensor mask = masking == 0 ? Tensor() : masking == 1 ? padding_mask(2, M) : row_mask(2, N, M, 3);
          auto r = a->forward(x, c, mask, causal, true);
          Twin t = naive_pattern(pa, x, keys, mask, causal, vc.rule);
          CHECK(allclose(r.output, t.output, 1e-10, 1e-12));
          CHECK(allclose(r.attention, t.attention, 1e-10, 1e-12));
        }
    }
  }
}

TEST_CASE("sparse_strided and sparse_fixed default to causal, the twin agrees with the defaults") {
  for (const VariantCase& vc : {VariantCase{"sparse_strided(heads=2, stride=3)", strided_rule(3)},
                                VariantCase{"sparse_fixed(heads=2, block=4, summary=2)", fixed_rule(4, 2)}}) {
    CAPTURE(vc.spec);
    auto a = make64(vc.spec);
    CHECK(projected(a).config.causal);
    Generator g(2);
    Tensor x = randn({2, 21, 8}, g, kFloat64);
    Tensor mask = padding_mask(2, 21);
    auto r = a->forward(x, {}, mask, false, true);
    Twin t = naive_pattern(projected(a), x, x, mask, true, vc.rule);
    CHECK(allclose(r.output, t.output, 1e-10, 1e-12));
    CHECK(allclose(r.attention, t.attention, 1e-10, 1e-12));
    CHECK(r.attention.at({0, 0, 2, 3}) == 0.0);  // causal
    // cross-attention needs causal=false explicitly
    CHECK(error_of([&] { a->forward(x, randn({2, 5, 8}, g, kFloat64)); }).find("causal attention needs self-attention") !=
          std::string::npos);
  }
}

TEST_CASE("longer sequences: several tiles per part, every variant at defaults-like options (float64)") {
  const std::vector<VariantCase> cases = {
      {"local(heads=2, window=20)", local_rule(20)},
      {"local(heads=2, window=20, sink_tokens=4)", local_rule(20, 4)},
      {"sparse_strided(heads=2, stride=9)", strided_rule(9)},
      {"sparse_fixed(heads=2, block=16, summary=3)", fixed_rule(16, 3)},
      {"dilated(heads=2, window=10, dilation=3)", dilated_rule(10, 3)},
  };
  for (const VariantCase& vc : cases) {
    CAPTURE(vc.spec);
    auto a = make64(vc.spec);
    const bool causal = projected(a).config.causal;
    Generator g(4);
    Tensor x = randn({1, 150, 8}, g, kFloat64);
    Tensor mask = row_mask(1, 150, 150, 5);
    Twin t = naive_pattern(projected(a), x, x, mask, causal, vc.rule);
    CHECK(allclose(a->forward(x, {}, mask).output, t.output, 1e-10, 1e-12));
    if (!causal) {
      Tensor ctx = randn({1, 170, 8}, g, kFloat64);
      CHECK(allclose(a->forward(x, ctx).output, naive_pattern(projected(a), x, ctx, {}, false, vc.rule).output, 1e-10, 1e-12));
    }
  }
}

TEST_CASE("float32 layers agree with float64 ones with the same weights") {
  for (std::string spec : {"local(heads=2, window=7)", "local(heads=2, window=7, sink_tokens=3)",
                           "sparse_strided(heads=2, stride=5)",
                           "sparse_fixed(heads=2, block=6, summary=2)", "dilated(heads=2, window=3, dilation=3)"}) {
    CAPTURE(spec);
    manual_seed(3);
    auto a32 = make_attention(spec, 16), a64 = make_attention(spec, 16);
    a64->to(kFloat64);
    TensorMap state;
    for (auto& [name, t] : a32->state_dict()) state[name] = to(t, kFloat64);
    a64->load_state_dict(state);
    Generator g(4);
    Tensor x = randn({2, 90, 16}, g, kFloat64);
    Tensor y32 = a32->forward(to(x, kFloat32)).output;
    CHECK(y32.dtype() == kFloat32);
    CHECK(allclose(to(y32, kFloat64), a64->forward(x).output, 1e-4, 1e-5));
  }
}

TEST_CASE("a query row with no allowed key gives a zero head output (mask, pattern, cross-attention)") {
  auto a = make64("local(heads=2, window=1)");
  auto& pa = projected(a);
  Generator g(6);
  Tensor x = randn({2, 6, 8}, g, kFloat64).requires_grad_(), ctx = randn({2, 2, 8}, g, kFloat64);
  // rows n >= 4 are more than one position from every key m < 2
  auto r = a->forward(x, ctx, row_mask(2, 6, 2, 7), false, true);
  Tensor bias = pa.out_proj->bias;
  for (int64_t n : {4, 5}) CHECK(allclose(select(select(r.output, 0, 0), 0, n), bias, 0, 1e-15));
  CHECK(allclose(select(select(r.output, 0, 1), 0, 1), bias, 0, 1e-15));  // the masked row
  sum(r.output).backward();
  for (double v : x.grad().to_vector<double>()) CHECK(std::isfinite(v));
  for (double v : r.attention.to_vector<double>()) CHECK(std::isfinite(v));
}

TEST_CASE("local with a window covering the sequence equals mha with the same weights") {
  for (std::string opts : {"heads=2", "heads=2, key_size=3, value_size=5, gate=hard_concrete", "heads=4, bias=false"}) {
    CAPTURE(opts);
    auto m = make64("mha(" + opts + ")");
    auto l = make64("local(window=9, " + opts + ")", 8, 99);
    l->load_state_dict(m->state_dict());
    Generator g(8);
    Tensor x = randn({2, 10, 8}, g, kFloat64);
    Tensor mask = row_mask(2, 10, 10, 9);
    for (bool causal : {false, true}) {
      auto rm = m->forward(x, {}, mask, causal, true), rl = l->forward(x, {}, mask, causal, true);
      CHECK(allclose(rl.output, rm.output, 1e-10, 1e-12));
      CHECK(allclose(rl.attention, rm.attention, 1e-10, 1e-12));
    }
    // and the gradients
    Tensor xm = clone(x).requires_grad_(), xl = clone(x).requires_grad_();
    Tensor go = randn({2, 10, 8}, g, kFloat64);
    sum(m->forward(xm, {}, mask).output * go).backward();
    sum(l->forward(xl, {}, mask).output * go).backward();
    CHECK(allclose(xl.grad(), xm.grad(), 1e-10, 1e-12));
    auto pm = m->named_parameters(), pl = l->named_parameters();
    REQUIRE(pm.size() == pl.size());
    for (size_t i = 0; i < pm.size(); ++i) {
      CAPTURE(pm[i].first);
      CHECK(pm[i].first == pl[i].first);
      CHECK(allclose(pl[i].second.grad(), pm[i].second.grad(), 1e-10, 1e-12));
    }
  }
}

TEST_CASE("local with sinks: the sinks join the window once, sink_tokens=0 is plain local, s >= N is mha") {
  auto plain = make64("local(heads=2, window=2)");
  auto sinks = make64("local(heads=2, window=2, sink_tokens=0)", 8, 99);
  auto all = make64("local(heads=2, window=2, sink_tokens=12)", 8, 98);
  auto dense = make64("mha(heads=2)", 8, 97);
  sinks->load_state_dict(plain->state_dict());
  all->load_state_dict(plain->state_dict());
  dense->load_state_dict(plain->state_dict());
  auto two = make64("local(heads=2, window=2, sink_tokens=2)", 8, 96);
  two->load_state_dict(plain->state_dict());
  Generator g(14);
  Tensor x = randn({2, 12, 8}, g, kFloat64);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto rp = plain->forward(x, {}, {}, causal, true);
    CHECK(allclose(sinks->forward(x, {}, {}, causal).output, rp.output, 0, 0));
    // every key is a sink when s >= N: full attention (with causal: mha's causal attention)
    CHECK(allclose(all->forward(x, {}, {}, causal).output, dense->forward(x, {}, {}, causal).output, 1e-10, 1e-12));
    auto r2 = two->forward(x, {}, {}, causal, true);
    // row 9 attends the sinks 0, 1 and the window 7..11 (causal: 7..9), nothing in the gap 2..6
    for (int64_t m = 0; m < 12; ++m) {
      CAPTURE(m);
      const bool allowed = m < 2 || (m >= 7 && (causal ? m <= 9 : m <= 11));
      CHECK((r2.attention.at({1, 1, 9, m}) > 0.0) == allowed);
    }
    // row 1 has its sinks inside its window: each key once, the row sums to 1 as plain local's does
    CHECK(allclose(narrow(r2.attention, 2, 0, 3), narrow(rp.attention, 2, 0, 3), 1e-12, 1e-14));
    CHECK(allclose(sum(r2.attention, {-1}), ones({2, 2, 12}, kFloat64), 1e-12, 1e-12));
  }
}

TEST_CASE("pattern gradcheck: every variant, self and causal with padding, cross with a masked row, gates") {
  const std::vector<std::string> specs = {
      "local(heads=2, window=1)",
      "local(heads=2, window=2, causal=true, gate=hard_concrete)",
      "local(heads=2, window=1, sink_tokens=2)",
      "local(heads=2, window=1, sink_tokens=1, causal=true, key_size=3)",
      "sparse_strided(heads=2, stride=2)",
      "sparse_strided(heads=2, stride=3, causal=false, bias=false)",
      "sparse_fixed(heads=2, block=3, summary=1, gate=hard_concrete)",
      "sparse_fixed(heads=2, block=2, summary=1, causal=false)",
      "dilated(heads=2, window=1, dilation=2)",
      "dilated(heads=2, window=1, dilation=3, causal=true, key_size=3)",
  };
  for (const std::string& spec : specs) {
    CAPTURE(spec);
    auto a = make64(spec);
    const bool causal = projected(a).config.causal;
    Generator g(10);
    Tensor x = randn({2, 7, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    for (bool cross : {false, true}) {
      if (cross && causal) continue;
      CAPTURE(cross);
      Tensor mask = cross ? row_mask(2, 7, 6, 11) : padding_mask(2, 7);
      auto r = gradcheck(
          [&](const std::vector<Tensor>& in) { return a->forward(in[0], cross ? in[1] : Tensor(), mask).output; },
          inputs);
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

TEST_CASE("local with sinks gradcheck: cross-attention rows past the window attend the sinks alone") {
  auto a = make64("local(heads=2, window=1, sink_tokens=2, key_size=3)");
  Generator g(15);
  Tensor x = randn({2, 8, 8}, g, kFloat64).requires_grad_();    // queries n = 0..7
  Tensor ctx = randn({2, 4, 8}, g, kFloat64).requires_grad_();  // keys m = 0..3: rows n >= 5 see the sinks only
  std::vector<Tensor> inputs = {x, ctx};
  for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
  Tensor mask = row_mask(2, 8, 4, 16);
  auto probs = a->forward(x, ctx, mask, false, true).attention;  // (2, 2, 8, 4)
  CHECK(probs.at({0, 0, 6, 2}) == 0.0);
  CHECK(probs.at({0, 0, 6, 0}) + probs.at({0, 0, 6, 1}) == doctest::Approx(1.0));
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], mask).output; }, inputs);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("attention dropout (train mode) is the kernel's counter-based draw on the joint pattern") {
  for (const VariantCase& vc : {VariantCase{"sparse_strided(heads=2, stride=3, attn_dropout=0.3)", strided_rule(3)},
                                VariantCase{"local(heads=2, window=2, sink_tokens=2, attn_dropout=0.4)", local_rule(2, 2)},
                                VariantCase{"dilated(heads=2, window=2, dilation=2, attn_dropout=0.5)", dilated_rule(2, 2)}}) {
    CAPTURE(vc.spec);
    auto a = make64(vc.spec);
    auto& pa = projected(a);
    a->train();
    Generator g(12);
    Tensor x = randn({2, 11, 8}, g, kFloat64);
    Generator before = pa.gen;
    const uint64_t seed = before.next_u64();  // the draw forward() makes
    Tensor y = a->forward(x).output;
    Twin t = naive_pattern(pa, x, x, {}, pa.config.causal, vc.rule, pa.config.attn_dropout, seed);
    CHECK(allclose(y, t.output, 1e-10, 1e-12));
    CHECK_FALSE(allclose(a->forward(x).output, y));  // a new draw per call
    a->eval();
    CHECK(allclose(a->forward(x).output, naive_pattern(pa, x, x, {}, pa.config.causal, vc.rule).output, 1e-10, 1e-12));
  }
}

TEST_CASE("pattern specs round-trip, list the MHA parameters, and state their costs") {
  for (std::string spec : {"local(window=5)", "local(window=5, sink_tokens=3)", "sparse_strided(stride=4)", "sparse_fixed(block=6, summary=2)",
                           "dilated(window=3, dilation=4)"}) {
    CAPTURE(spec);
    auto a = make_attention(spec, 16);
    auto b = make_attention(a->spec(), 16);
    CHECK(b->spec() == a->spec());
    std::vector<std::string> names;
    for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
    CHECK(names == std::vector<std::string>{"q_proj.weight(16,16)", "q_proj.bias(16)", "k_proj.weight(16,16)",
                                            "k_proj.bias(16)", "v_proj.weight(16,16)", "v_proj.bias(16)",
                                            "out_proj.weight(16,16)", "out_proj.bias(16)"});
    CHECK(a->named_buffers().size() == 1);
  }
  CHECK(make_attention("local", 16)->spec().find("window=64") != std::string::npos);
  CHECK(make_attention("local", 16)->spec().find("sink_tokens") == std::string::npos);  // shown when s > 0
  CHECK(make_attention("local(sink_tokens=4)", 16)->spec().find("window=64, sink_tokens=4") != std::string::npos);
  CHECK(make_attention("sparse_strided", 16)->spec().find("stride=32") != std::string::npos);
  CHECK(make_attention("sparse_fixed", 16)->spec().find("block=32, summary=4") != std::string::npos);
  CHECK(make_attention("dilated", 16)->spec().find("window=32, dilation=2") != std::string::npos);
  for (const auto& v : nn::variants())
    if (v.schema.name == "local" || v.schema.name == "sparse_strided" || v.schema.name == "sparse_fixed" ||
        v.schema.name == "dilated") {
      CHECK(v.schema.time_cost.find("O(") == 0);
      CHECK(v.schema.memory_cost.find("O(") == 0);
    }
}

TEST_CASE("bad pattern options are rejected with the variant, option and value") {
  auto err = [](const std::string& spec) { return error_of([&] { make_attention(spec, 16); }); };
  CHECK(err("local(window=0)").find("local: option window=0: must be a positive integer") != std::string::npos);
  CHECK(err("local(window=-3)").find("window=-3") != std::string::npos);
  CHECK(err("sparse_strided(stride=0)").find("sparse_strided: option stride=0") != std::string::npos);
  CHECK(err("sparse_fixed(block=0)").find("sparse_fixed: option block=0") != std::string::npos);
  CHECK(err("sparse_fixed(block=4, summary=5)").find("summary=5: must be in [0, block=4]") != std::string::npos);
  CHECK(err("sparse_fixed(summary=-1)").find("summary=-1") != std::string::npos);
  CHECK(err("dilated(dilation=0)").find("dilated: option dilation=0") != std::string::npos);
  CHECK(err("dilated(window=2.5)").find("expected an integer") != std::string::npos);
  CHECK(err("local(sink_tokens=-1)").find("local: option sink_tokens=-1: must be a non-negative integer") !=
        std::string::npos);
  CHECK(err("local(sink_tokens=1.5)").find("expected an integer") != std::string::npos);
  CHECK(err("local(stride=2)").find("local: unknown option stride") != std::string::npos);
  auto a = make_attention("local(heads=2)", 16);
  Tensor x = zeros({1, 3, 16}), c = zeros({1, 4, 16});
  CHECK(error_of([&] { a->forward(x, c, {}, true); }).find("local: causal attention needs self-attention") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, c, zeros({1, 1, 3, 3}, kBool)); }).find("does not broadcast") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, zeros({1, 1, 3, 3})); }).find("mask must be bool") != std::string::npos);
}

TEST_CASE("forward+backward peak memory grows linearly in N (no N x M tensor)") {
  // mha's scores and probabilities alone would grow 16x from N = 512 to 2048
  for (std::string spec : {"local(heads=2, window=16)", "local(heads=2, window=16, sink_tokens=4)",
                           "dilated(heads=2, window=8, dilation=2)",
                           "sparse_strided(heads=2, stride=32)", "sparse_fixed(heads=2, block=32, summary=2)"}) {
    CAPTURE(spec);
    manual_seed(0);
    auto a = make_attention(spec, 32);
    auto peak = [&](int64_t N) {
      Generator g(1);
      Tensor x = randn({1, N, 32}, g).requires_grad_();
      empty_cache();
      const int64_t base = allocator_stats().bytes_in_use;
      reset_peak_bytes();
      sum(a->forward(x).output).backward();
      return double(allocator_stats().peak_bytes_in_use - base);
    };
    const double small = peak(512), large = peak(2048);
    // sparse_strided is O(N (l + N/l)) in time but its memory is still linear
    CHECK(large / small < 5.0);
  }
}

TEST_CASE("docs/attention.md: the local example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("local(heads=4, window=3)", 32);
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);  // (B, N, D)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 10, 32)
  Tensor p = r.attention;  // (2, 4, 10, 10), densified
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 10, 32});
  CHECK(p.shape() == Dims{2, 4, 10, 10});
  CHECK(p.at({0, 0, 9, 5}) == 0.0);  // |9 - 5| > 3
  CHECK(p.at({0, 0, 5, 6}) == 0.0);  // causal
  CHECK(p.at({0, 0, 9, 6}) > 0.0);

  auto sinks = nn::make_attention("local(heads=4, window=3, sink_tokens=2)", 32);
  Tensor ps = sinks->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true).attention;
  CHECK(ps.at({0, 0, 9, 0}) > 0.0);  // a sink
  CHECK(ps.at({0, 0, 9, 4}) == 0.0);  // the gap
  CHECK(ps.at({0, 0, 9, 6}) > 0.0);  // the window
  sinks->eval();
  auto cache = sinks->make_cache(2, 0);
  sinks->forward_step(x, *cache);
  CHECK(cache->numel() == 2 * 4 * (2 + 3) * (8 + 8));  // B h (s + w) (dk + dv)
}

TEST_CASE("docs/attention.md: the sparse_strided, sparse_fixed and dilated examples compile and run") {
  manual_seed(0);
  Generator gen(1);
  Tensor x = randn({2, 64, 32}, gen);  // (B, N, D)
  auto strided = nn::make_attention("sparse_strided(heads=4, stride=8)", 32);  // causal by default
  auto fixed = nn::make_attention("sparse_fixed(heads=4, block=8, summary=2)", 32);
  auto dilated = nn::make_attention("dilated(heads=4, window=4, dilation=2)", 32);
  std::vector<bool> keep(2 * 64, true);
  for (int m = 54; m < 64; ++m) keep[64 + m] = false;  // the second sequence pads its last 10 keys
  Tensor pad = from_vector(keep, {2, 1, 1, 64});       // (B, 1, 1, M) key mask
  Tensor y1 = strided->forward(x, {}, pad).output;   // (2, 64, 32)
  Tensor y2 = fixed->forward(x, {}, pad).output;     // (2, 64, 32)
  Tensor y3 = dilated->forward(x, {}, pad).output;   // (2, 64, 32)
  sum(y1 + y2 + y3).backward();
  CHECK(y1.shape() == Dims{2, 64, 32});
  CHECK(y3.shape() == Dims{2, 64, 32});
  auto p = fixed->forward(x, {}, {}, false, true).attention;  // (2, 4, 64, 64)
  CHECK(p.at({0, 0, 20, 7}) > 0.0);   // 7 mod 8 >= 8 - 2: a summary column
  CHECK(p.at({0, 0, 20, 5}) == 0.0);  // another block, not a summary column
  CHECK(p.at({0, 0, 20, 30}) == 0.0); // causal
}

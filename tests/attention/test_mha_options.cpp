// The options of current models on mha (docs/attention.md, "Options of current models"):
// float64 gradchecks of each option and of combinations (masks, causal, cross-attention), the
// identities that pin each option, decoding with the cache, pruning, and the option errors.
#include "autograd/grad_helpers.hpp"
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/rotary.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;
using nn::MultiHeadAttention;

namespace {

// A float64 mha with every parameter drawn from N(0, 0.5) (sinks and RMSNorm weights too, so
// that none sits at its special initial value) and head_mask from U(0.5, 1.5).
std::shared_ptr<MultiHeadAttention> options64(const std::string& spec, uint64_t seed = 7, int64_t d_model = 8) {
  manual_seed(seed);
  auto a = std::dynamic_pointer_cast<MultiHeadAttention>(make_attention(spec, d_model));
  REQUIRE(a);
  a->to(kFloat64);
  a->eval();
  Generator g(seed + 100);
  NoGradGuard no_grad;
  for (auto& [name, p] : a->named_parameters()) copy_(p, randn(p.shape(), g, kFloat64) * 0.5);
  copy_(a->head_mask, rand({a->config.heads}, g, kFloat64) + 0.5);
  return a;
}

// (2, 1, 3, 5): random entries, key 0 allowed except in batch 1's query row 1, which allows nothing.
Tensor query_mask() {
  return from_vector<bool>({true, false, true, true, false,  true, true, false, true, true,  true, true, true, false, true,
                            true, true, false, false, true,  false, false, false, false, false,  true, false, true, true, true},
                           {2, 1, 3, 5});
}

// gradcheck of output and probabilities (composed path), in x, the context and every parameter:
// cross-attention with a query mask (one fully masked row) and causal self-attention.
void check_option_grads(const std::string& spec) {
  CAPTURE(spec);
  auto a = options64(spec);
  std::vector<Tensor> params;
  for (auto& [n, p] : a->named_parameters()) params.push_back(p);
  Generator g(3);
  Tensor x = randn({2, 3, 8}, g, kFloat64).requires_grad_();
  Tensor ctx = randn({2, 5, 8}, g, kFloat64).requires_grad_();
  std::vector<Tensor> inputs = {x, ctx};
  inputs.insert(inputs.end(), params.begin(), params.end());
  const Tensor mask = query_mask();
  check_grad(spec + " cross+mask", [&](const std::vector<Tensor>& in) {
    auto r = a->forward(in[0], in[1], mask, false, true);
    return cat({flatten(r.output), flatten(r.attention)});
  }, inputs);
  inputs.erase(inputs.begin() + 1);
  check_grad(spec + " causal", [&](const std::vector<Tensor>& in) {
    auto r = a->forward(in[0], {}, {}, true, true);
    return cat({flatten(r.output), flatten(r.attention)});
  }, inputs);
}

}  // namespace

TEST_CASE("mha options gradcheck: each option alone") {
  for (std::string spec :
       {"mha(heads=4, kv_heads=2, key_size=2, value_size=3)", "mha(heads=4, kv_heads=1)", "mha(heads=2, alibi=true)",
        "mha(heads=3, key_size=2, value_size=2, alibi=true)", "mha(heads=2, qk_norm=true)", "mha(heads=2, softcap=0.7)",
        "mha(heads=2, score=sigmoid)", "mha(heads=2, score=sigmoid, sigmoid_bias=0.3)", "mha(heads=2, score=softpick)",
        "mha(heads=2, sinks=true)", "mha(heads=2, rope=true, rope_base=100)"})
    check_option_grads(spec);
}

TEST_CASE("mha options gradcheck: every option together, with each score function") {
  for (std::string spec : {"mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=1.5, sinks=true, rope=true)",
                           "mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=1.5, score=sigmoid, rope=true)",
                           "mha(heads=4, kv_heads=1, alibi=true, qk_norm=true, softcap=1.5, score=softpick, rope=true, "
                           "bias=false, gate=hard_concrete)"})
    check_option_grads(spec);
}

TEST_CASE("mha options: kv_heads = heads is plain mha; grouped kv equals mha with repeated kv heads") {
  Generator g(5);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 6, 8}, g, kFloat64);
  auto plain = options64("mha(heads=4)");
  auto same = options64("mha(heads=4, kv_heads=4)", 9);
  CHECK(same->spec() == plain->spec());
  same->load_state_dict(plain->state_dict());
  CHECK(allclose(same->forward(x, ctx, {}, false, true).output, plain->forward(x, ctx, {}, false, true).output, 0, 0));

  // g = 2: query heads 0, 1 read kv head 0 and heads 2, 3 kv head 1.
  auto grouped = options64("mha(heads=4, kv_heads=2)");
  CHECK(grouped->k_proj->weight.shape() == Dims{4, 8});
  CHECK(grouped->v_proj->weight.shape() == Dims{4, 8});
  CHECK(grouped->kv_map() == std::vector<int64_t>{0, 0, 1, 1});
  {
    NoGradGuard no_grad;
    const std::vector<int64_t> rep = {0, 0, 1, 1};
    copy_(plain->q_proj->weight, grouped->q_proj->weight);
    copy_(plain->q_proj->bias, grouped->q_proj->bias);
    copy_(plain->k_proj->weight, nn::take_heads(grouped->k_proj->weight, rep, 2, 0));
    copy_(plain->k_proj->bias, nn::take_heads(grouped->k_proj->bias, rep, 2, 0));
    copy_(plain->v_proj->weight, nn::take_heads(grouped->v_proj->weight, rep, 2, 0));
    copy_(plain->v_proj->bias, nn::take_heads(grouped->v_proj->bias, rep, 2, 0));
    copy_(plain->out_proj->weight, grouped->out_proj->weight);
    copy_(plain->out_proj->bias, grouped->out_proj->bias);
    copy_(plain->head_mask, grouped->head_mask);
  }
  auto rg = grouped->forward(x, ctx, {}, false, true), rp = plain->forward(x, ctx, {}, false, true);
  CHECK(allclose(rg.output, rp.output, 1e-12, 1e-13));
  CHECK(allclose(rg.attention, rp.attention, 1e-12, 1e-13));
}

TEST_CASE("mha options: ALiBi slopes for 8 and 6 heads, and the bias they add") {
  const std::vector<double> want8 = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625};
  CHECK(nn::alibi_slopes(8) == want8);
  // the 4 slopes of 4 heads, then entries 0 and 2 of the 8-head list
  const std::vector<double> want6 = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  CHECK(nn::alibi_slopes(6) == want6);
  CHECK(nn::alibi_slopes(1) == std::vector<double>{std::exp2(-8.0)});

  // With zero query weights every score is 0, so P_i[n, m] is proportional to exp(-s_i |n - m|).
  auto a = options64("mha(heads=2, alibi=true)");
  {
    NoGradGuard no_grad;
    zero_(a->q_proj->weight);
    zero_(a->q_proj->bias);
  }
  Generator g(6);
  Tensor x = randn({1, 3, 8}, g, kFloat64);
  auto p = a->forward(x, {}, {}, false, true).attention.to_vector<double>();  // (1, 2, 3, 3)
  const std::vector<double> s = nn::alibi_slopes(2);
  for (int i = 0; i < 2; ++i)
    for (int n = 0; n < 3; ++n) {
      double z = 0;
      for (int m = 0; m < 3; ++m) z += std::exp(-s[i] * std::abs(n - m));
      for (int m = 0; m < 3; ++m) CHECK(p[(i * 3 + n) * 3 + m] == doctest::Approx(std::exp(-s[i] * std::abs(n - m)) / z).epsilon(1e-12));
    }
}

TEST_CASE("mha options: softcap 1e9 is no softcap; sinks at -1e30 are plain softmax") {
  Generator g(8);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 5, 8}, g, kFloat64);
  const Tensor mask = query_mask();
  Tensor xm = narrow(x, 1, 0, 3);
  auto plain = options64("mha(heads=2, alibi=true)");
  auto capped = options64("mha(heads=2, alibi=true, softcap=1e9)", 11);
  capped->load_state_dict(plain->state_dict());
  auto rp = plain->forward(xm, ctx, mask, false, true), rc = capped->forward(xm, ctx, mask, false, true);
  CHECK(allclose(rc.output, rp.output, 1e-12, 1e-13));
  CHECK(allclose(rc.attention, rp.attention, 1e-12, 1e-13));

  auto sunk = options64("mha(heads=2, alibi=true, sinks=true)", 12);
  TensorMap w = plain->state_dict();
  w["sinks"] = full({2}, -1e30, kFloat64);
  sunk->load_state_dict(w);
  auto rs = sunk->forward(xm, ctx, mask, false, true);
  CHECK(allclose(rs.output, rp.output, 1e-12, 1e-13));
  CHECK(allclose(rs.attention, rp.attention, 1e-12, 1e-13));
  // a finite sink takes probability mass: rows sum below 1
  w["sinks"] = full({2}, 0.5, kFloat64);
  sunk->load_state_dict(w);
  Tensor rows = sum(sunk->forward(x, {}, {}, false, true).attention, {-1});
  for (double r : rows.to_vector<double>()) CHECK(r < 1.0);
}

TEST_CASE("mha options: a fully masked row gives zero probabilities and output for every score function") {
  Generator g(9);
  Tensor x = randn({2, 3, 8}, g, kFloat64), ctx = randn({2, 5, 8}, g, kFloat64);
  for (std::string spec : {"mha(heads=2, score=sigmoid)", "mha(heads=2, score=softpick)", "mha(heads=2, sinks=true)",
                           "mha(heads=2, score=softpick, alibi=true, softcap=2, kv_heads=1)"}) {
    CAPTURE(spec);
    auto a = options64(spec);
    auto r = a->forward(x, ctx, query_mask(), false, true);
    for (double v : r.attention.to_vector<double>()) CHECK(std::isfinite(v));
    Tensor empty_row = select(select(r.attention, 0, 1), 1, 1);  // (h, M) of batch 1, query row 1
    for (double v : empty_row.to_vector<double>()) CHECK(v == 0.0);
    // every head outputs zero there, so the layer outputs out_proj's bias
    CHECK(allclose(select(select(r.output, 0, 1), 0, 1), a->out_proj->bias, 0, 1e-15));
    for (int64_t m = 0; m < 5; ++m) {  // and a disallowed entry of another row is zero too
      if (!query_mask().to_vector<bool>()[m]) CHECK(r.attention.to_vector<double>()[m] == 0.0);
    }
  }
}

TEST_CASE("mha options: sigmoid and softpick probabilities follow their formulas") {
  Generator g(10);
  Tensor x = randn({1, 4, 8}, g, kFloat64);
  auto sig = options64("mha(heads=2, softcap=3, score=sigmoid)");
  auto pick = options64("mha(heads=2, softcap=3, score=softpick)", 14);
  pick->load_state_dict(sig->state_dict());
  // the scores by hand: softcap(q . k / sqrt(dk)), (1, 2, 4, 4)
  auto lin = [&](const nn::Linear& l) { return matmul(x, transpose(l.weight, 0, 1)) + l.bias; };
  Tensor q = nn::split_heads(lin(*sig->q_proj), 2), k = nn::split_heads(lin(*sig->k_proj), 2);
  auto s = (tanh(matmul(q, transpose(k, -2, -1)) / (2.0 * 3.0)) * 3.0).to_vector<double>();  // dk = 4
  auto pg = sig->forward(x, {}, {}, true, true).attention.to_vector<double>();
  auto pp = pick->forward(x, {}, {}, true, true).attention.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int n = 0; n < 4; ++n) {
      const int64_t row = (i * 4 + n) * 4;
      double c = 0, z = 0;  // softpick: c = max(0, max allowed s); z = sum |e| over m <= n
      for (int m = 0; m <= n; ++m) c = std::max(c, s[row + m]);
      for (int m = 0; m <= n; ++m) z += std::abs(std::exp(s[row + m] - c) - std::exp(-c));
      for (int m = 0; m < 4; ++m) {
        const double want_sig = m <= n ? 1.0 / (1.0 + std::exp(-(s[row + m] - std::log(4.0)))) : 0.0;
        const double e = std::exp(s[row + m] - c) - std::exp(-c);
        const double want_pick = m <= n ? std::max(e, 0.0) / (z + 1e-6) : 0.0;
        CHECK(pg[row + m] == doctest::Approx(want_sig).epsilon(1e-12));
        CHECK(pp[row + m] == doctest::Approx(want_pick).epsilon(1e-12));
      }
    }
}

TEST_CASE("mha options: qk_norm makes scores invariant to the scale of q and k; rope_rotate is RoPE") {
  Generator g(11);
  Tensor x = randn({2, 4, 8}, g, kFloat64);
  auto a = options64("mha(heads=2, qk_norm=true, bias=false, rope=true)");
  auto ref = a->forward(x, {}, {}, true, true);
  {
    NoGradGuard no_grad;
    mul_(a->q_proj->weight, 7.0);
    mul_(a->k_proj->weight, 3.0);
  }
  auto scaled = a->forward(x, {}, {}, true, true);
  // exact but for RMSNorm's eps = 1e-6 against mean squares of order 1 and more
  CHECK(allclose(scaled.attention, ref.attention, 1e-5, 1e-7));
  CHECK(allclose(scaled.output, ref.output, 1e-5, 1e-7));
  CHECK_FALSE(allclose(scaled.attention, ref.attention, 1e-10, 1e-12));  // the eps is there

  // rope_rotate is the rotate-half RoPE of nn::RotaryEmbedding at every offset
  nn::RotaryEmbedding rope(6, 32, 10000.0);
  Tensor u = randn({2, 3, 5, 6}, g, kFloat32);
  CHECK(allclose(nn::rope_rotate(u, 4), rope.apply(u, 4), 1e-5, 1e-6));
  // and q . k after RoPE depends on the position difference only
  Tensor q = randn({1, 1, 1, 6}, g, kFloat64), k = randn({1, 1, 1, 6}, g, kFloat64);
  auto dot = [&](int64_t n, int64_t m) { return sum(nn::rope_rotate(q, n) * nn::rope_rotate(k, m)).item<double>(); };
  CHECK(dot(5, 2) == doctest::Approx(dot(13, 10)).epsilon(1e-12));
  CHECK(dot(5, 2) != doctest::Approx(dot(5, 3)).epsilon(1e-6));
}

TEST_CASE("mha options: parameter names and shapes, and spec strings") {
  auto a = make_attention("mha(heads=4, kv_heads=2, qk_norm=true, sinks=true, key_size=4, value_size=3)", 8);
  std::map<std::string, Dims> shapes;
  for (auto& [n, p] : a->named_parameters()) shapes[n] = p.shape();
  CHECK(shapes.at("q_proj.weight") == Dims{16, 8});
  CHECK(shapes.at("k_proj.weight") == Dims{8, 8});
  CHECK(shapes.at("k_proj.bias") == Dims{8});
  CHECK(shapes.at("v_proj.weight") == Dims{6, 8});
  CHECK(shapes.at("q_norm.weight") == Dims{4});
  CHECK(shapes.at("k_norm.weight") == Dims{4});
  CHECK(shapes.at("sinks") == Dims{4});
  for (double s : a->state_dict().at("sinks").to_vector<float>()) CHECK(s == 0.0);

  CHECK(make_attention("mha(heads=2)", 8)->spec() ==
        "mha(heads=2, key_size=4, value_size=4, bias=true, key_bias=true, causal=false, attn_dropout=0)");
  for (std::string spec : {"mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=30, sinks=true, rope=true, rope_base=500)",
                           "mha(heads=2, score=sigmoid, sigmoid_bias=-1.5)", "mha(heads=2, score=softpick, softpick_eps=1e-05)"}) {
    CAPTURE(spec);
    auto b = make_attention(spec, 8);
    const std::string pinned = b->spec();
    CHECK(make_attention(pinned, 8)->spec() == pinned);
    CHECK(pinned.find("mha(heads=") == 0);
    CHECK_NOTHROW(make_attention(pinned, 8)->load_state_dict(b->state_dict()));
  }
  // Pinned slopes print so they parse back: a number never carries the '+' of the list separator.
  for (std::string slopes : {"1e21+0.5", "0.25+1e-07", "3e300+0.125", "1.5e21+2e22"}) {
    CAPTURE(slopes);
    auto pinned = std::dynamic_pointer_cast<MultiHeadAttention>(
        make_attention("mha(heads=2, alibi=true, alibi_slopes=" + slopes + ")", 8));
    REQUIRE(pinned);
    auto back = std::dynamic_pointer_cast<MultiHeadAttention>(make_attention(pinned->spec(), 8));
    REQUIRE(back);
    CHECK(back->slopes() == pinned->slopes());
    CHECK(back->spec() == pinned->spec());
  }
  const std::string all = make_attention("mha(heads=4, kv_heads=2, alibi=true, softcap=30, rope=true)", 8)->spec();
  CHECK(all.find("kv_heads=2") != std::string::npos);
  CHECK(all.find("softcap=30") != std::string::npos);
  CHECK(all.find("rope=true, rope_base=10000") != std::string::npos);
}

TEST_CASE("mha options: bad values are ValueErrors naming the option, the value and what is allowed") {
  struct Bad {
    std::string spec, option, words;
  };
  for (const Bad& b : std::vector<Bad>{
           {"mha(heads=4, kv_heads=3)", "kv_heads=3", "allowed: 1, 2, 4"},
           {"mha(heads=4, kv_heads=0)", "kv_heads=0", "allowed: 1, 2, 4"},
           {"mha(heads=2, sinks=true, score=sigmoid)", "sinks=true", "score=softmax"},
           {"mha(heads=2, key_size=3, rope=true)", "rope=true", "even key_size, got key_size=3"},
           {"mha(heads=2, softcap=-1)", "softcap=-1", "c >= 0"},
           {"mha(heads=2, score=sparsemax)", "score=sparsemax", "softmax, sigmoid, softpick"},
           {"mha(heads=2, sigmoid_bias=1)", "sigmoid_bias=1", "score=sigmoid only"},
           {"mha(heads=2, score=softpick, softpick_eps=-1)", "softpick_eps=-1", "eps > 0"},
           {"mha(heads=2, score=softpick, softpick_eps=0)", "softpick_eps=0", "eps > 0"},
           {"mha(heads=2, gate_temperature=-1)", "gate_temperature=-1", "gate=hard_concrete"},
           {"mha(heads=2, gate_gamma=5)", "gate_gamma=5", "gate=hard_concrete"},
           {"mha(heads=2, gate_zeta=0.5)", "gate_zeta=0.5", "gate=hard_concrete"},
           {"mha(heads=2, gate_init=1)", "gate_init=1", "gate=hard_concrete"},
           {"mha(heads=2, rope_base=100)", "rope_base=100", "rope=true"},
           {"mha(heads=2, rope=true, rope_base=0)", "rope_base=0", "> 0"},
           {"mha(heads=2, alibi=true, alibi_slopes=0.5)", "alibi_slopes=0.5", "one slope per head (2)"},
           {"mha(heads=2, alibi=true, alibi_slopes=0.5+x)", "alibi_slopes=0.5+x", "\"x\" is not a number"},
           {"mha(heads=4, kv_heads=2, kv_index=0+1)", "kv_index=0+1", "one entry per head (4)"},
           {"mha(heads=4, kv_heads=2, kv_index=0+1+2+0)", "kv_index=0+1+2+0", "[0, kv_heads=2)"},
       }) {
    CAPTURE(b.spec);
    std::string err;
    try {
      make_attention(b.spec, 8);
    } catch (const ValueError& e) {
      err = e.what();
    }
    CHECK_MESSAGE(err.find("mha") != std::string::npos, err);
    CHECK_MESSAGE(err.find(b.option) != std::string::npos, err);
    CHECK_MESSAGE(err.find(b.words) != std::string::npos, err);
  }
}

TEST_CASE("mha options: the decoding cache holds g key/value heads") {
  // The cache holds g key/value heads: g/h of plain mha's.
  auto plain = make_attention("mha(heads=4, key_size=3, value_size=5)", 8);
  auto grouped = make_attention("mha(heads=4, key_size=3, value_size=5, kv_heads=2)", 8);
  auto multi_query = make_attention("mha(heads=4, key_size=3, value_size=5, kv_heads=1)", 8);
  const int64_t full = plain->make_cache(2, 10)->numel();
  CHECK(full == 2 * 4 * 10 * (3 + 5));
  CHECK(grouped->make_cache(2, 10)->numel() * 2 == full);
  CHECK(multi_query->make_cache(2, 10)->numel() * 4 == full);
}

TEST_CASE("mha options: prune_heads keeps the kv heads still used; pruned equals masked") {
  struct Case {
    std::string spec;
    std::vector<int64_t> keep;
    int64_t kv_heads;
    std::vector<int64_t> kv_index;  // empty: equal groups, no buffer
  };
  for (const Case& c : std::vector<Case>{
           {"mha(heads=4, kv_heads=2, alibi=true, sinks=true, rope=true)", {0, 1, 2}, 2, {0, 0, 1}},
           {"mha(heads=4, kv_heads=2, alibi=true)", {2, 0}, 2, {}},
           {"mha(heads=4, kv_heads=2, softcap=2, score=sigmoid)", {3, 2}, 1, {}},
           {"mha(heads=4, kv_heads=2, qk_norm=true, score=softpick)", {0, 2, 1, 3}, 2, {0, 1, 0, 1}},
           {"mha(heads=6, key_size=2, value_size=2, kv_heads=3, alibi=true, sinks=true)", {5, 1, 0}, 2, {0, 1, 1}},
       }) {
    CAPTURE(c.spec);
    auto a = options64(c.spec);
    auto pruned = std::dynamic_pointer_cast<MultiHeadAttention>(a->prune_heads(c.keep));
    REQUIRE(pruned);
    CHECK(pruned->kv_heads() == c.kv_heads);
    CHECK(pruned->options.kv_index == c.kv_index);
    CHECK(pruned->kv_index.defined() == !c.kv_index.empty());
    if (!c.kv_index.empty()) {
      CHECK(pruned->kv_index.dtype() == kInt64);
      CHECK(pruned->kv_index.to_vector<int64_t>() == c.kv_index);
      CHECK(pruned->state_dict().count("kv_index") == 1);
    }
    // masked: the dropped heads' head_mask entries set to zero
    std::vector<double> hm = a->head_mask.to_vector<double>();
    for (int64_t i = 0; i < a->config.heads; ++i)
      if (std::find(c.keep.begin(), c.keep.end(), i) == c.keep.end()) hm[i] = 0;
    {
      NoGradGuard no_grad;
      copy_(a->head_mask, from_vector(hm));
    }
    Generator g(31);
    Tensor x = randn({2, 5, 8}, g, kFloat64), ctx = randn({2, 6, 8}, g, kFloat64);
    CHECK(allclose(pruned->forward(x, {}, {}, true, true).output, a->forward(x, {}, {}, true, true).output, 1e-11, 1e-12));
    CHECK(allclose(pruned->forward(x, ctx).output, a->forward(x, ctx).output, 1e-11, 1e-12));
    // the pinned spec rebuilds the pruned layer: its weights load strictly and give its output
    auto rebuilt = make_attention(pruned->spec(), 8);
    rebuilt->to(kFloat64);
    REQUIRE_NOTHROW(rebuilt->load_state_dict(pruned->state_dict()));
    rebuilt->eval();
    CHECK(allclose(rebuilt->forward(x, ctx).output, pruned->forward(x, ctx).output, 0, 0));
    // and its cache still decodes like its causal forward
    auto cache = pruned->make_cache(2, 5);
    CHECK(allclose(pruned->forward_step(x, *cache), pruned->forward(x, {}, {}, true).output, 1e-10, 1e-12));
  }
}

TEST_CASE("mha options: the fused path equals the composed one, output and every gradient, for every option mix") {
  for (std::string spec :
       {"mha(heads=4, kv_heads=2, key_size=2, value_size=3)", "mha(heads=4, kv_heads=1, alibi=true)",
        "mha(heads=3, key_size=2, value_size=2, alibi=true, softcap=0.9)", "mha(heads=2, qk_norm=true, rope=true)",
        "mha(heads=2, score=sigmoid)", "mha(heads=2, score=sigmoid, sigmoid_bias=0.4, softcap=2)",
        "mha(heads=2, sinks=true)", "mha(heads=2, score=softpick, alibi=true)",
        "mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=1.5, sinks=true, rope=true, gate=hard_concrete)",
        "mha(heads=4, kv_heads=1, alibi=true, qk_norm=true, softcap=1.5, score=sigmoid, rope=true, bias=false)"}) {
    CAPTURE(spec);
    auto a = options64(spec);
    Generator g(51);
    Tensor x0 = randn({2, 3, 8}, g, kFloat64), c0 = randn({2, 5, 8}, g, kFloat64), go = randn({2, 3, 8}, g, kFloat64);
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      std::vector<std::vector<Tensor>> grads;
      std::vector<Tensor> outs;
      for (bool need_weights : {false, true}) {
        Tensor x = clone(x0).requires_grad_(), c = clone(c0).requires_grad_();
        a->zero_grad();
        Tensor out = causal ? a->forward(x, {}, {}, true, need_weights).output
                            : a->forward(x, c, query_mask(), false, need_weights).output;
        sum(out * go).backward();
        std::vector<Tensor> gr = {x.grad()};
        if (!causal) gr.push_back(c.grad());
        for (auto& [n, p] : a->named_parameters()) gr.push_back(p.grad());
        grads.push_back(gr);
        outs.push_back(out);
      }
      CHECK(allclose(outs[0], outs[1], 1e-11, 1e-12));
      REQUIRE(grads[0].size() == grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) {
        CAPTURE(i);
        CHECK(allclose(grads[0][i], grads[1][i], 1e-10, 1e-12));
      }
    }
  }
}

TEST_CASE("mha options: fused-path gradcheck with every option, mask and a pruned layer's kv_index") {
  for (bool pruned : {false, true}) {
    CAPTURE(pruned);
    std::shared_ptr<nn::Attention> a =
        options64("mha(heads=4, kv_heads=2, alibi=true, qk_norm=true, softcap=1.5, sinks=true, rope=true)");
    if (pruned) a = a->prune_heads({0, 1, 2});  // kv_index 0, 0, 1
    std::vector<Tensor> inputs;
    Generator g(52);
    inputs.push_back(randn({2, 3, 8}, g, kFloat64).requires_grad_());
    inputs.push_back(randn({2, 5, 8}, g, kFloat64).requires_grad_());
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    const Tensor mask = query_mask();
    check_grad("fused", [&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], mask).output; }, inputs);
  }
}

TEST_CASE("docs/attention.md: the mha options example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("mha(heads=8, kv_heads=2, rope=true, qk_norm=true, softcap=30, sinks=true)", 64);
  Generator gen(1);
  Tensor x = randn({2, 10, 64}, gen);                           // (B, N, D)
  Tensor y = attn->forward(x, {}, {}, /*causal=*/true).output;  // (2, 10, 64), fused kernel
  attn->eval();
  auto cache = attn->make_cache(2, 16);                           // holds 2 kv heads: (2, 2, 16, 8) each
  Tensor first = attn->forward_step(narrow(x, 1, 0, 4), *cache);  // (2, 4, 64)
  CHECK(y.shape() == Dims{2, 10, 64});
  CHECK(first.shape() == Dims{2, 4, 64});
  CHECK(cache->numel() == 2 * 2 * 16 * (8 + 8));
  CHECK(allclose(first, narrow(attn->forward(x, {}, {}, true).output, 1, 0, 4), 1e-4, 1e-5));
}

TEST_CASE("mha's score option: parsed once into a ScoreFunction, printed back by name") {
  for (nn::ScoreFunction f : {nn::ScoreFunction::Softmax, nn::ScoreFunction::Sigmoid, nn::ScoreFunction::Softpick})
    CHECK(nn::parse_score(nn::score_name(f)) == f);
  CHECK_THROWS_WITH_AS(nn::parse_score("relu"),
                       doctest::Contains("mha: score relu is not a score function (allowed: softmax, sigmoid, softpick)"),
                       ValueError);
  CHECK(nn::make_attention("mha(heads=2, score=softpick)", 8)->spec().find("score=softpick, softpick_eps=") !=
        std::string::npos);
  CHECK(nn::make_attention("mha(heads=2)", 8)->spec().find("score") == std::string::npos);  // softmax: the default
}

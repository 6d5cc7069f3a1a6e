// mha (docs/attention.md, "mha", "Head gates"): gradients, the documented identities, gates, pruning,
// and the spec-string errors.
#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;

namespace {

std::shared_ptr<nn::Attention> mha64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(7);
  auto a = make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

// Dense reference: softmax(q k^T / sqrt(dk) masked) v per head, written with plain loops over
// the module's own weights.
Tensor naive_mha(const nn::MultiHeadAttention& m, const Tensor& x, const Tensor& ctx, const std::vector<bool>& allowed) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1);
  const int64_t h = m.config.heads, dk = m.config.key_size, dv = m.config.value_size;
  auto lin = [](const nn::Linear& l, const Tensor& in) {  // (B, T, in) -> (B, T, out)
    Tensor y = matmul(in, transpose(l.weight, 0, 1));
    return l.bias.defined() ? y + l.bias : y;
  };
  auto q = lin(*m.q_proj, x).to_vector<double>(), k = lin(*m.k_proj, ctx).to_vector<double>();
  auto v = lin(*m.v_proj, ctx).to_vector<double>();
  std::vector<double> o(B * N * h * dv, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> s(M);
        double mx = -INFINITY;
        for (int64_t j = 0; j < M; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < dk; ++d) acc += q[(b * N + n) * h * dk + i * dk + d] * k[(b * M + j) * h * dk + i * dk + d];
          s[j] = allowed[(b * N + n) * M + j] ? acc / std::sqrt(double(dk)) : -INFINITY;
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < M; ++j) z += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
        for (int64_t j = 0; j < M; ++j) {
          double p = (s[j] == -INFINITY || z == 0) ? 0 : std::exp(s[j] - mx) / z;
          for (int64_t d = 0; d < dv; ++d) o[(b * N + n) * h * dv + i * dv + d] += p * v[(b * M + j) * h * dv + i * dv + d];
        }
      }
  return lin(*m.out_proj, from_vector(o, {B, N, h * dv}));
}

}  // namespace

TEST_CASE("mha matches a naive loop implementation, with decoupled key and value sizes") {
  auto a = mha64("mha(heads=2, key_size=3, value_size=5)");
  auto& m = static_cast<nn::MultiHeadAttention&>(*a);
  Generator g(1);
  Tensor x = randn({2, 4, 8}, g, kFloat64);
  std::vector<bool> all(2 * 4 * 4, true);
  CHECK(allclose(a->forward(x).output, naive_mha(m, x, x, all), 1e-10, 1e-12));
  CHECK(m.q_proj->weight.shape() == Dims{6, 8});
  CHECK(m.v_proj->weight.shape() == Dims{10, 8});
  CHECK(m.out_proj->weight.shape() == Dims{8, 10});
}

TEST_CASE("mha causal, padding masks, fully masked rows and cross-attention") {
  auto a = mha64("mha(heads=2)");
  auto& m = static_cast<nn::MultiHeadAttention&>(*a);
  Generator g(2);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 3, 8}, g, kFloat64);
  // causal
  std::vector<bool> causal(2 * 4 * 4);
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 4; ++j) causal[(b * 4 + n) * 4 + j] = j <= n;
  CHECK(allclose(a->forward(x, {}, {}, true).output, naive_mha(m, x, x, causal), 1e-10, 1e-12));
  // key padding (B, 1, 1, M) with a fully masked example -> that example's heads output 0
  Tensor pad = from_vector<bool>({true, false, true, false, false, false}, {2, 1, 1, 3});
  std::vector<bool> allowed(2 * 4 * 3);
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 3; ++j) allowed[(b * 4 + n) * 3 + j] = b == 0 && j != 1;
  auto r = a->forward(x, ctx, pad, false, true);
  CHECK(allclose(r.output, naive_mha(m, x, ctx, allowed), 1e-10, 1e-12));
  CHECK(r.attention.shape() == Dims{2, 2, 4, 3});
  for (double p : narrow(r.attention, 0, 1, 1).to_vector<double>()) CHECK(p == 0.0);
}

TEST_CASE("mha gradcheck: self, causal, masked, cross-attention, gated, non-contiguous input") {
  for (std::string spec : {"mha(heads=2, key_size=3)", "mha(heads=2, causal=true)", "mha(heads=4, bias=false)",
                           "mha(heads=2, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = mha64(spec);
    a->eval();
    std::vector<Tensor> params;
    for (auto& [n, p] : a->named_parameters()) params.push_back(p);
    Generator g(3);
    Tensor xin = randn({2, 3, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 5, 8}, g, kFloat64).requires_grad_();
    Tensor mask = from_vector<bool>({true, true, false, true, true, false, true, true, true, true}, {2, 1, 1, 5});
    const bool causal = spec.find("causal") != std::string::npos;
    std::vector<Tensor> inputs = {xin, ctx};
    for (auto& p : params) inputs.push_back(p);
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return causal ? a->forward(in[0]).output : a->forward(in[0], in[1], mask).output;
        },
        inputs);
    CHECK_MESSAGE(r.ok, r.message);
  }
  // non-contiguous x: a transposed view as the leaf
  auto a = mha64("mha(heads=2)");
  Generator g(4);
  Tensor x = transpose(randn({3, 2, 8}, g, kFloat64), 0, 1);
  x.requires_grad_();
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0]).output; }, {x});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("mha's fused tiled path (need_weights=false) equals the composed path, output and every gradient") {
  struct Case {
    std::string spec;
    bool cross, causal, masked;
  };
  for (const Case& c : {Case{"mha(heads=2, key_size=3, value_size=5)", false, false, false},
                        Case{"mha(heads=2, gate=hard_concrete)", false, true, false},
                        Case{"mha(heads=4)", true, false, true}, Case{"mha(heads=2)", false, true, true}}) {
    CAPTURE(c.spec);
    auto a = mha64(c.spec);
    a->eval();
    Generator g(12);
    Tensor x = randn({2, 70, 8}, g, kFloat64).requires_grad_();  // 70: more than one 64-row tile
    Tensor ctx = randn({2, 67, 8}, g, kFloat64).requires_grad_();
    const int64_t M = c.cross ? 67 : 70;
    Tensor mask;
    if (c.masked) {  // per-query mask with one fully masked row per example
      mask = gt(rand({2, 1, 70, M}, g, kFloat64), 0.3);
      for (int64_t b = 0; b < 2; ++b) {
        Tensor row = select(select(select(mask, 0, b), 0, 0), 0, 5);
        fill_(row, 0.0);
      }
    }
    Tensor gy = randn({2, 70, 8}, g, kFloat64);
    auto run = [&](bool need_weights) {
      a->zero_grad();
      x.set_grad({});
      ctx.set_grad({});
      Tensor y = a->forward(x, c.cross ? ctx : Tensor(), mask, c.causal, need_weights).output;
      sum(y * gy).backward();
      std::vector<Tensor> out = {y, x.grad()};
      if (c.cross) out.push_back(ctx.grad());
      for (auto& [n, p] : a->named_parameters()) out.push_back(p.grad().defined() ? clone(p.grad()) : zeros_like(p));
      return out;
    };
    auto fused = run(false), composed = run(true);
    REQUIRE(fused.size() == composed.size());
    for (size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      CHECK(allclose(fused[i], composed[i], 1e-11, 1e-13));
    }
    if (c.masked) CHECK(allclose(narrow(fused[0], 1, 5, 1), narrow(composed[0], 1, 5, 1), 0, 1e-15));
  }
}

TEST_CASE("mha's fused path applies attention dropout in train mode only") {
  auto a = mha64("mha(heads=2, attn_dropout=0.5)");
  Generator g(13);
  Tensor x = randn({1, 16, 8}, g, kFloat64);
  a->eval();
  Tensor e1 = a->forward(x).output, e2 = a->forward(x).output;
  CHECK(allclose(e1, e2, 0, 0));
  a->train();
  Tensor t1 = a->forward(x).output, t2 = a->forward(x).output;
  CHECK_FALSE(allclose(t1, e1, 1e-6, 1e-6));
  CHECK_FALSE(allclose(t1, t2, 1e-6, 1e-6));  // a new draw per call
}

TEST_CASE("changing k_proj.bias never changes mha's output (seed 000)") {
  auto a = mha64("mha(heads=2)");
  auto& m = static_cast<nn::MultiHeadAttention&>(*a);
  Generator g(5);
  Tensor x = randn({2, 5, 8}, g, kFloat64);
  Tensor before = a->forward(x).output;
  {
    NoGradGuard ng;
    copy_(m.k_proj->bias, randn({8}, g, kFloat64, 0, 10));
  }
  CHECK(allclose(a->forward(x).output, before, 1e-10, 1e-12));
  // and key_bias=false removes the tensor
  auto nb = make_attention("mha(heads=2, key_bias=false)", 8);
  bool has = false;
  for (auto& [n, p] : nb->named_parameters()) has |= n == "k_proj.bias";
  CHECK_FALSE(has);
}

TEST_CASE("all-open gates equal no gates, the L0 penalty follows the formula") {
  auto plain = mha64("mha(heads=2)");
  auto gated = mha64("mha(heads=2, gate=hard_concrete)");
  gated->load_state_dict(plain->state_dict(), false);
  auto& gm = static_cast<nn::MultiHeadAttention&>(*gated);
  {
    NoGradGuard ng;
    fill_(gm.gate->log_alpha, 10.0);  // sigmoid(10) * 1.2 - 0.1 > 1: clamped to exactly 1
  }
  plain->eval();
  gated->eval();
  Generator g(6);
  Tensor x = randn({2, 3, 8}, g, kFloat64);
  CHECK(allclose(gated->forward(x).output, plain->forward(x).output, 1e-12, 1e-12));
  // L0 = sum_i sigmoid(log_alpha_i - beta log(-gamma/zeta))
  double expect = 2.0 / (1.0 + std::exp(-(10.0 - 0.33 * std::log(0.1 / 1.1))));
  CHECK(gated->l0_penalty().item() == doctest::Approx(expect).epsilon(1e-12));
  CHECK(plain->l0_penalty().item() == 0.0);
}

TEST_CASE("train-mode gates are stochastic per call, within 0..1, and shared across the batch") {
  auto a = mha64("mha(heads=4, gate=hard_concrete, gate_init=0)");
  auto& m = static_cast<nn::MultiHeadAttention&>(*a);
  a->train();
  Tensor g1 = m.gate->forward(), g2 = m.gate->forward();
  CHECK(g1.shape() == Dims{4});
  CHECK_FALSE(allclose(g1, g2));
  for (double v : g1.to_vector<double>()) CHECK((v >= 0 && v <= 1));
  m.config.gate.hard = true;
  m.gate->config.hard = true;
  a->eval();
  for (double v : m.gate->forward().to_vector<double>()) CHECK((v == 0.0 || v == 1.0));
}

TEST_CASE("head_mask gradient is available when requested (head importance)") {
  auto a = mha64("mha(heads=2)");
  auto& m = static_cast<nn::MultiHeadAttention&>(*a);
  m.head_mask.requires_grad_();
  Generator g(9);
  Tensor x = randn({1, 3, 8}, g, kFloat64);
  sum(a->forward(x).output).backward();
  REQUIRE(m.head_mask.grad().defined());
  CHECK(m.head_mask.grad().shape() == Dims{2});
}

TEST_CASE("spec errors name the variant, the option and the allowed values") {
  CHECK(error_of([] { make_attention("mha(heads=3)", 8); }).find("heads=3 does not divide d_model=8") !=
        std::string::npos);
  CHECK_NOTHROW(make_attention("mha(heads=3, key_size=4, value_size=4)", 8));
  auto unknown = error_of([] { make_attention("mha(head=2)", 8); });
  CHECK(unknown.find("mha: unknown option head") != std::string::npos);
  CHECK(unknown.find("heads") != std::string::npos);
  CHECK(error_of([] { make_attention("mha(heads=two)", 8); }).find("expected an integer") != std::string::npos);
  CHECK(error_of([] { make_attention("mha(gate=soft)", 8); }).find("none, hard_concrete") != std::string::npos);
  CHECK(error_of([] { make_attention("mha(causal=yes)", 8); }).find("true or false") != std::string::npos);
  CHECK(error_of([] { make_attention("nope(heads=2)", 8); }).find("unknown variant nope") != std::string::npos);
  CHECK(error_of([] { make_attention("mha(heads=2", 8); }).find("missing ')'") != std::string::npos);
  auto a = make_attention("mha(heads=2)", 8);
  Tensor x = zeros({1, 3, 8}), c = zeros({1, 2, 8});
  CHECK(error_of([&] { a->forward(x, c, {}, true); }).find("causal attention needs self-attention") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 3, 6})); }).find("input must be (B, N, 8)") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, zeros({1, 1, 3, 3})); }).find("mask must be bool") != std::string::npos);
}

TEST_CASE("parameter names and shapes follow the spec") {
  auto a = make_attention("mha(heads=2, key_size=3, value_size=5, gate=hard_concrete)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(6,8)", "q_proj.bias(6)", "k_proj.weight(6,8)",
                                          "k_proj.bias(6)", "v_proj.weight(10,8)", "v_proj.bias(10)",
                                          "out_proj.weight(8,10)", "out_proj.bias(8)", "gate.log_alpha(2)"});
  auto bufs = a->named_buffers();
  REQUIRE(bufs.size() == 1);
  CHECK(bufs[0].first == "head_mask");
}

TEST_CASE("docs/attention.md: the mha example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("mha(heads=4, key_size=8)", 32);
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);  // (B, N, D)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 10, 32)
  Tensor p = r.attention;  // (2, 4, 10, 10)
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 10, 32});
  CHECK(p.shape() == Dims{2, 4, 10, 10});
  CHECK(p.at({0, 0, 0, 1}) == 0.0);  // causal
}

// linformer (docs/attention.md, "linformer"): a dense twin of the documented formulas, gradients for
// every option, key masks (a fully masked key set gives zero head outputs), pruning, errors,
// parameter names, and the docs example.
#include "helpers.hpp"
#include "lowrank_helpers.hpp"
#include "nn/attention/linformer.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::lowrank;

namespace {

// K' = E[:, :M] K, V' = F[:, :M] V per head, with masked keys' rows zeroed first; O = softmax(q
// K'^T / sqrt(dk)) V'. Plain loops over the layer's weights.
Tensor naive_linformer(const nn::Linformer& l, const Tensor& x, const Tensor& ctx, const Tensor& mask) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1), h = l.config.heads;
  const int64_t dk = l.config.key_size, dv = l.config.value_size, kp = l.settings.proj_len, L = l.settings.max_len;
  const Vec ek = l.proj_k.to_vector<double>();
  const Vec ev = l.settings.share_kv ? ek : l.proj_v.to_vector<double>();
  auto allowed = key_allowed(mask, B, h, M);
  std::vector<std::vector<Vec>> o(B, std::vector<Vec>(h));
  for (int64_t b = 0; b < B; ++b) {
    Vec q = linear(*l.q_proj, batch(x, b), N), k = linear(*l.k_proj, batch(ctx, b), M);
    Vec v = linear(*l.v_proj, batch(ctx, b), M);
    for (int64_t i = 0; i < h; ++i) {
      Vec qi = head(q, N, h * dk, i, dk), ki = head(k, M, h * dk, i, dk), vi = head(v, M, h * dv, i, dv);
      for (int64_t m = 0; m < M; ++m)
        if (!allowed[b][i][m]) {
          for (int64_t c = 0; c < dk; ++c) ki[m * dk + c] = 0;
          for (int64_t c = 0; c < dv; ++c) vi[m * dv + c] = 0;
        }
      Vec kproj(kp * dk, 0.0), vproj(kp * dv, 0.0);
      for (int64_t r = 0; r < kp; ++r)
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t c = 0; c < dk; ++c) kproj[r * dk + c] += ek[r * L + m] * ki[m * dk + c];
          for (int64_t c = 0; c < dv; ++c) vproj[r * dv + c] += ev[r * L + m] * vi[m * dv + c];
        }
      Vec p = softmax_rows(scores(qi, kproj, N, kp, dk, 1.0 / std::sqrt(double(dk))), N, kp);
      o[b][i] = mm(p, vproj, N, kp, dv);
    }
  }
  return finish(l, o, N);
}

}  // namespace

TEST_CASE("linformer matches its dense twin: self, cross-attention, share=kv, key masks") {
  Generator g(1);
  Tensor x = randn({2, 5, 8}, g, kFloat64), ctx = randn({2, 7, 8}, g, kFloat64);
  // batch 1 masks every key: its head outputs are 0, so its output rows are out_proj.bias
  Tensor pad = from_vector<bool>({true, false, true, true, false, true, true, false, false, false, false, false, false,
                                  false},
                                 {2, 1, 1, 7});
  Tensor per_head = from_vector<bool>({true, false, true, true, true, false, true, false, false, true, true, true, false,
                                       true},
                                      {1, 2, 1, 7});
  for (std::string spec : {"linformer(heads=2, proj_len=3, max_len=9)", "linformer(heads=2, proj_len=4, max_len=7, share=kv)",
                           "linformer(heads=2, key_size=3, value_size=5, proj_len=2, max_len=12, bias=false)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    auto& l = static_cast<nn::Linformer&>(*a);
    CHECK(allclose(a->forward(x).output, naive_linformer(l, x, x, {}), 1e-10, 1e-12));
    CHECK(allclose(a->forward(x, ctx).output, naive_linformer(l, x, ctx, {}), 1e-10, 1e-12));
    Tensor y = a->forward(x, ctx, pad).output;
    CHECK(allclose(y, naive_linformer(l, x, ctx, pad), 1e-10, 1e-12));
    CHECK(allclose(a->forward(x, ctx, per_head).output, naive_linformer(l, x, ctx, per_head), 1e-10, 1e-12));
    Tensor bias = l.out_proj->bias.defined() ? l.out_proj->bias : zeros({8}, kFloat64);
    for (int64_t n = 0; n < 5; ++n) CHECK(max_diff(select(select(y, 0, 1), 0, n), bias) == 0.0);
  }
}

TEST_CASE("linformer returns no attention probabilities") {
  auto a = layer64("linformer(heads=2, proj_len=3, max_len=8)", 8);
  Generator g(2);
  auto r = a->forward(randn({1, 4, 8}, g, kFloat64), {}, {}, false, /*need_weights=*/true);
  CHECK(r.output.shape() == Dims{1, 4, 8});
  CHECK_FALSE(r.attention.defined());
}

TEST_CASE("linformer gradcheck: self, cross-attention with a padding mask, share=kv, bias=false, gated") {
  Tensor pad = from_vector<bool>({true, true, false, true, false, false, false, false, false, false}, {2, 1, 1, 5});
  for (std::string spec : {"linformer(heads=2, proj_len=3, max_len=6)", "linformer(heads=2, proj_len=2, max_len=5, share=kv)",
                           "linformer(heads=2, proj_len=3, max_len=5, bias=false, key_size=3)",
                           "linformer(heads=2, proj_len=2, max_len=5, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    Generator g(3);
    Tensor x = randn({2, 3, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 5, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& p : params(*a)) inputs.push_back(p);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0]).output; }, inputs);
    CHECK_MESSAGE(self.ok, self.message);
    auto cross = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], pad).output; }, inputs);
    CHECK_MESSAGE(cross.ok, cross.message);
  }
}

TEST_CASE("linformer errors: causal, non-key masks, keys longer than max_len") {
  CHECK(error_of([] { nn::make_attention("linformer(causal=true)", 8); }).find("linformer: option causal=true") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("linformer(share=qk)", 8); }).find("none, kv") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("linformer(proj_len=0)", 8); }).find("proj_len") != std::string::npos);
  auto a = layer64("linformer(heads=2, proj_len=3, max_len=6)", 8);
  Tensor x = zeros({1, 4, 8}, kFloat64);
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("linformer: causal") != std::string::npos);
  Tensor per_query = from_vector<bool>(std::vector<bool>(16, true), {1, 1, 4, 4});
  CHECK(error_of([&] { a->forward(x, {}, per_query); }).find("only key masks") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, zeros({1, 7, 8}, kFloat64)); }).find("key length 7 exceeds max_len=6") !=
        std::string::npos);
}

TEST_CASE("linformer parameter names and shapes follow the spec") {
  auto names = [](const std::string& spec) {
    std::vector<std::string> out;
    for (auto& [n, p] : nn::make_attention(spec, 8)->named_parameters()) out.push_back(n + to_string(p.shape()));
    return out;
  };
  CHECK(names("linformer(heads=2, proj_len=3, max_len=10)") ==
        std::vector<std::string>{"proj_k(3,10)", "proj_v(3,10)", "q_proj.weight(8,8)", "q_proj.bias(8)",
                                 "k_proj.weight(8,8)", "k_proj.bias(8)", "v_proj.weight(8,8)", "v_proj.bias(8)",
                                 "out_proj.weight(8,8)", "out_proj.bias(8)"});
  CHECK(names("linformer(heads=2, proj_len=3, max_len=10, share=kv, bias=false)") ==
        std::vector<std::string>{"proj_k(3,10)", "q_proj.weight(8,8)", "k_proj.weight(8,8)", "v_proj.weight(8,8)",
                                 "out_proj.weight(8,8)"});
  // xavier_uniform_(gain 1/sqrt(2)) as the authors' fairseq code: |E| <= sqrt(6 / (k + L)) / sqrt(2)
  manual_seed(3);
  auto a = nn::make_attention("linformer(proj_len=16, max_len=64)", 8);
  const double bound = std::sqrt(6.0 / 80.0) / std::sqrt(2.0);
  double mx = 0;
  for (double e : static_cast<nn::Linformer&>(*a).proj_k.to_vector<double>()) mx = std::max(mx, std::abs(e));
  CHECK(mx <= bound);
  CHECK(mx > 0.9 * bound);
  // spec() pins every size: it builds the same layer
  auto b = nn::make_attention(a->spec(), 8);
  CHECK(b->spec() == a->spec());
}

TEST_CASE("docs/attention.md: the linformer example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("linformer(heads=4, proj_len=16, max_len=256)", 32);
  Generator gen(1);
  Tensor x = randn({2, 200, 32}, gen);                  // (B, N, D), N <= max_len
  Tensor pad = ones({2, 1, 1, 200}, kBool);             // key padding mask (B, 1, 1, M)
  auto r = attn->forward(x, {}, pad, false, /*need_weights=*/true);
  Tensor y = r.output;                                  // (2, 200, 32)
  sum(y).backward();
  bool none = !r.attention.defined();                   // true: no probabilities over keys
  CHECK(y.shape() == Dims{2, 200, 32});
  CHECK(none);
}

TEST_CASE("linformer: attn_dropout drops probabilities in train mode only") {
  auto a = layer64("linformer(heads=2, proj_len=3, max_len=8, attn_dropout=0.5)", 8);
  auto plain = layer64("linformer(heads=2, proj_len=3, max_len=8)", 8);
  Generator g(9);
  Tensor x = randn({2, 8, 8}, g, kFloat64);
  CHECK(allclose(a->forward(x).output, plain->forward(x).output, 1e-12, 1e-12));  // eval: no dropout
  a->train();
  Tensor y = a->forward(x).output;
  CHECK_FALSE(allclose(y, plain->forward(x).output, 1e-6, 1e-6));
  for (double e : y.to_vector<double>()) CHECK(std::isfinite(e));
}

// compressed (docs/attention.md, "compressed"): a dense twin of the documented formulas, gradients for
// every option, key masks (a fully masked key set gives zero head outputs), pruning (k/v
// projections and convolution inputs stay whole, kv_heads records them), errors, parameter
// names and init, and the docs example.
#include "helpers.hpp"
#include "lowrank_helpers.hpp"
#include "nn/attention/compressed.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::lowrank;

namespace {

// PyTorch Conv1d(in, out, kernel=s, stride=s) on a channels-last t (M, in) -> (M/s, out).
Vec compress(const nn::StridedConv1d& c, const Vec& t, int64_t M, int64_t s) {
  const int64_t out = c.weight.size(0), in = c.weight.size(1), Mc = M / s;
  Vec w = c.weight.to_vector<double>(), bias = c.bias.defined() ? c.bias.to_vector<double>() : Vec(out, 0.0);
  Vec y(Mc * out);
  for (int64_t j = 0; j < Mc; ++j)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias[o];
      for (int64_t ch = 0; ch < in; ++ch)
        for (int64_t tap = 0; tap < s; ++tap) acc += w[(o * in + ch) * s + tap] * t[(j * s + tap) * in + ch];
      y[j * out + o] = acc;
    }
  return y;
}

// Kc[j, o] = bias[o] + sum_{c, t} W[o, c, t] K[j*s + t, c] with masked K rows zeroed; compressed
// row j allowed iff one of keys j*s .. j*s + s-1 is; O_i = softmax(q_i Kc_i^T / sqrt(dk)) Vc_i.
Tensor naive_compressed(const nn::CompressedAttention& l, const Tensor& x, const Tensor& ctx, const Tensor& mask) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1), h = l.config.heads, H = l.settings.kv_heads;
  const int64_t dk = l.config.key_size, dv = l.config.value_size, s = l.settings.stride, Mc = M / s;
  auto allowed = key_allowed(mask, B, 1, M);
  std::vector<std::vector<Vec>> o(B, std::vector<Vec>(h));
  for (int64_t b = 0; b < B; ++b) {
    Vec q = linear(*l.q_proj, batch(x, b), N), k = linear(*l.k_proj, batch(ctx, b), M);
    Vec v = linear(*l.v_proj, batch(ctx, b), M);
    for (int64_t m = 0; m < M; ++m)
      if (!allowed[b][0][m]) {
        for (int64_t c = 0; c < H * dk; ++c) k[m * H * dk + c] = 0;
        for (int64_t c = 0; c < H * dv; ++c) v[m * H * dv + c] = 0;
      }
    Vec kc = compress(*l.compress_k, k, M, s), vc = compress(*l.compress_v, v, M, s);
    std::vector<bool> allowed_c(Mc, false);
    for (int64_t j = 0; j < Mc; ++j)
      for (int64_t t = 0; t < s; ++t) allowed_c[j] = allowed_c[j] || allowed[b][0][j * s + t];
    for (int64_t i = 0; i < h; ++i) {
      Vec qi = head(q, N, h * dk, i, dk), ki = head(kc, Mc, h * dk, i, dk), vi = head(vc, Mc, h * dv, i, dv);
      Vec p = softmax_rows(scores(qi, ki, N, Mc, dk, 1.0 / std::sqrt(double(dk))), N, Mc, allowed_c);
      o[b][i] = mm(p, vi, N, Mc, dv);
    }
  }
  return finish(l, o, N);
}

}  // namespace

TEST_CASE("compressed matches its dense twin: self, cross-attention, key masks, kv_heads, bias=false") {
  Generator g(1);
  Tensor x = randn({2, 5, 8}, g, kFloat64), ctx = randn({2, 6, 8}, g, kFloat64);
  // stride 2: batch 0 allows compressed rows 0 (via key 1) and 2, not 1; batch 1 masks every key
  Tensor pad = from_vector<bool>({false, true, false, false, true, true, false, false, false, false, false, false},
                                 {2, 1, 1, 6});
  for (std::string spec : {"compressed(heads=2, stride=2)", "compressed(heads=2, stride=3, key_size=3, value_size=5)",
                           "compressed(heads=2, stride=2, kv_heads=3, bias=false)", "compressed(heads=1, stride=1)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    auto& l = static_cast<nn::CompressedAttention&>(*a);
    Tensor x6 = narrow(ctx, 1, 0, 6);
    CHECK(allclose(a->forward(x6).output, naive_compressed(l, x6, x6, {}), 1e-10, 1e-12));
    CHECK(allclose(a->forward(x, ctx).output, naive_compressed(l, x, ctx, {}), 1e-10, 1e-12));
    if (l.settings.stride == 2) {
      Tensor y = a->forward(x, ctx, pad).output;
      CHECK(allclose(y, naive_compressed(l, x, ctx, pad), 1e-10, 1e-12));
      Tensor bias = l.out_proj->bias.defined() ? l.out_proj->bias : zeros({8}, kFloat64);
      for (int64_t n = 0; n < 5; ++n) CHECK(max_diff(select(select(y, 0, 1), 0, n), bias) == 0.0);
      for (double e : y.to_vector<double>()) CHECK(std::isfinite(e));
    }
  }
}

TEST_CASE("compressed with stride 1 and the identity convolution is mha over the same projections") {
  auto a = layer64("compressed(heads=2, stride=1)", 8);
  auto& l = static_cast<nn::CompressedAttention&>(*a);
  auto m = layer64("mha(heads=2)", 8);
  {
    NoGradGuard ng;
    for (auto* c : {l.compress_k.get(), l.compress_v.get()}) {
      copy_(c->weight, reshape(eye(8, kFloat64), {8, 8, 1}));
      zero_(c->bias);
    }
  }
  m->load_state_dict(a->state_dict(), false);
  Generator g(2);
  Tensor x = randn({2, 4, 8}, g, kFloat64);
  Tensor pad = from_vector<bool>({true, false, true, true, true, true, false, true}, {2, 1, 1, 4});
  CHECK(allclose(a->forward(x, {}, pad).output, m->forward(x, {}, pad).output, 1e-12, 1e-12));
  CHECK_FALSE(a->forward(x, {}, {}, false, true).attention.defined());  // none for compressed
}

TEST_CASE("compressed gradcheck: self, cross-attention with a padding mask, bias=false, kv_heads, gated") {
  Tensor pad = from_vector<bool>({true, false, false, false, true, true, false, false, false, false, false, false},
                                 {2, 1, 1, 6});
  for (std::string spec : {"compressed(heads=2, stride=2)", "compressed(heads=2, stride=3, bias=false, key_size=3)",
                           "compressed(heads=2, stride=2, kv_heads=3)", "compressed(heads=2, stride=2, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    Generator g(3);
    Tensor x = randn({2, 3, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& p : params(*a)) inputs.push_back(p);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[1]).output; }, inputs);
    CHECK_MESSAGE(self.ok, self.message);
    auto cross = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], pad).output; }, inputs);
    CHECK_MESSAGE(cross.ok, cross.message);
  }
}

TEST_CASE("compressed: a pruned layer equals the masked one, k/v projections and convolution inputs stay whole") {
  auto a = layer64("compressed(heads=4, key_size=3, value_size=2, stride=2, gate=hard_concrete)", 8);
  auto& l = static_cast<nn::CompressedAttention&>(*a);
  Generator g(4);
  {
    NoGradGuard ng;
    copy_(l.gate->log_alpha, randn({4}, g, kFloat64));
    copy_(l.head_mask, from_vector<double>({1, 0, 1, 0}));
  }
  Tensor x = randn({2, 6, 8}, g, kFloat64);
  Tensor pad = from_vector<bool>({true, true, false, true, true, true, true, true, true, true, false, false}, {2, 1, 1, 6});
  Tensor masked = a->forward(x, {}, pad).output;
  auto p = a->prune_heads({0, 2});
  auto& pl = static_cast<nn::CompressedAttention&>(*p);
  CHECK(pl.config.heads == 2);
  CHECK(pl.settings.kv_heads == 4);
  CHECK(p->spec().find("kv_heads=4") != std::string::npos);
  CHECK(pl.q_proj->weight.shape() == Dims{6, 8});
  CHECK(pl.k_proj->weight.shape() == Dims{12, 8});
  CHECK(pl.v_proj->weight.shape() == Dims{8, 8});
  CHECK(pl.compress_k->weight.shape() == Dims{6, 12, 2});
  CHECK(pl.compress_v->weight.shape() == Dims{4, 8, 2});
  CHECK(pl.out_proj->weight.shape() == Dims{8, 4});
  CHECK(allclose(p->forward(x, {}, pad).output, masked, 1e-10, 1e-12));
  // Pruning the pruned layer again keeps kv_heads = 4.
  {
    NoGradGuard ng;
    copy_(pl.head_mask, from_vector<double>({0, 1}));
  }
  Tensor masked2 = p->forward(x, {}, pad).output;
  auto p2 = p->prune_heads({1});
  CHECK(static_cast<nn::CompressedAttention&>(*p2).settings.kv_heads == 4);
  CHECK(allclose(p2->forward(x, {}, pad).output, masked2, 1e-10, 1e-12));
}

TEST_CASE("compressed errors: causal, M not a multiple of stride, per-head and non-key masks") {
  CHECK(error_of([] { nn::make_attention("compressed(causal=true)", 8); }).find("compressed: option causal=true") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("compressed(stride=0)", 8); }).find("stride") != std::string::npos);
  auto a = layer64("compressed(heads=2, stride=2)", 8);
  Tensor x = zeros({1, 4, 8}, kFloat64);
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("compressed: causal") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, zeros({1, 5, 8}, kFloat64)); }).find("key length 5 is not a multiple of stride=2") !=
        std::string::npos);
  Tensor per_head = from_vector<bool>({true, true, false, true, true, false, true, true}, {1, 2, 1, 4});
  CHECK(error_of([&] { a->forward(x, {}, per_head); }).find("the same for every head") != std::string::npos);
  Tensor per_query = from_vector<bool>(std::vector<bool>(16, true), {1, 1, 4, 4});
  CHECK(error_of([&] { a->forward(x, {}, per_query); }).find("only key masks") != std::string::npos);
}

TEST_CASE("compressed parameter names, shapes and init follow the spec and Liu et al.'s code") {
  manual_seed(5);
  auto a = nn::make_attention("compressed(heads=2, stride=3)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(8,8)", "q_proj.bias(8)", "k_proj.weight(8,8)",
                                          "k_proj.bias(8)", "v_proj.weight(8,8)", "v_proj.bias(8)",
                                          "out_proj.weight(8,8)", "out_proj.bias(8)", "compress_k.weight(8,8,3)",
                                          "compress_k.bias(8)", "compress_v.weight(8,8,3)", "compress_v.bias(8)"});
  auto& l = static_cast<nn::CompressedAttention&>(*a);
  // xavier_uniform_: |w| <= sqrt(6 / (in*s + out*s)); bias zeros
  const double bound = std::sqrt(6.0 / (24.0 + 24.0));
  double mx = 0;
  for (double e : l.compress_k->weight.to_vector<double>()) mx = std::max(mx, std::abs(e));
  CHECK(mx <= bound);
  CHECK(mx > 0.8 * bound);
  for (double e : l.compress_v->bias.to_vector<double>()) CHECK(e == 0.0);
  auto nb = nn::make_attention("compressed(heads=2, bias=false)", 8);
  for (auto& [n, p] : nb->named_parameters()) CHECK(n.find("bias") == std::string::npos);
  CHECK(nn::make_attention(a->spec(), 8)->spec() == a->spec());
}

TEST_CASE("docs/attention.md: the compressed example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("compressed(heads=4, stride=4)", 32);
  Generator gen(1);
  Tensor x = randn({2, 64, 32}, gen);                        // (B, N, D), N a multiple of stride
  Tensor pad = ones({2, 1, 1, 64}, kBool);                   // key mask, the same for every head
  auto r = attn->forward(x, {}, pad, false, /*need_weights=*/true);
  Tensor y = r.output;                                       // (2, 64, 32); 64 x 16 scores per head
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 64, 32});
  CHECK_FALSE(r.attention.defined());                        // no probabilities over the original keys
  auto smaller = attn->prune_heads({0, 3});                  // k/v projections stay whole: kv_heads=4
  CHECK(smaller->spec().find("heads=2") != std::string::npos);
}

TEST_CASE("compressed: attn_dropout drops probabilities in train mode only") {
  auto a = layer64("compressed(heads=2, stride=2, attn_dropout=0.5)", 8);
  auto plain = layer64("compressed(heads=2, stride=2)", 8);
  Generator g(9);
  Tensor x = randn({2, 8, 8}, g, kFloat64);
  CHECK(allclose(a->forward(x).output, plain->forward(x).output, 1e-12, 1e-12));  // eval: no dropout
  a->train();
  Tensor y = a->forward(x).output;
  CHECK_FALSE(allclose(y, plain->forward(x).output, 1e-6, 1e-6));
  for (double e : y.to_vector<double>()) CHECK(std::isfinite(e));
}

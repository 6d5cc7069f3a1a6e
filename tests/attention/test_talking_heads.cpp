// talking_heads (docs/attention.md, "talking_heads", "Head gates"): a naive loop reference with hk
// != h != hv and the mixes on or off, gradients of every option combination, the identity with
// `mha`, pruning value heads, initialisation (identity and mix_init=random), spec errors and
// parameter names.
#include <algorithm>

#include "helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/talking_heads.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;
using nn::TalkingHeadsAttention;

namespace {

std::shared_ptr<nn::Attention> th64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(7);
  auto a = make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

TalkingHeadsAttention& as_th(const std::shared_ptr<nn::Attention>& a) {
  return dynamic_cast<TalkingHeadsAttention&>(*a);
}

// Replaces identity-initialised mixes by random ones, so that no test passes because a mix
// happens to be the identity.
void randomize_mixes(TalkingHeadsAttention& m, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  if (m.pre_mix.defined()) copy_(m.pre_mix, randn(m.pre_mix.shape(), g, kFloat64));
  if (m.post_mix.defined()) copy_(m.post_mix, randn(m.post_mix.shape(), g, kFloat64));
}

struct NaiveResult {
  Tensor output;  // (B, N, D)
  Tensor w;       // (B, h, N, M)
};

// The documented formulas as plain loops over the module's weights: J per logit head, the pre mix,
// masked softmax per softmax head, the post mix, U V per value head scaled by `head_scale` (hv,
// empty = head_mask), out_proj. `allowed` is (B, N, M), shared by the heads.
NaiveResult naive_th(const TalkingHeadsAttention& m, const Tensor& x, const Tensor& ctx,
                     const std::vector<bool>& allowed, std::vector<double> head_scale = {}) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1);
  const int64_t h = m.config.head.heads, hk = m.config.logit_heads, hv = m.config.value_heads;
  const int64_t dk = m.config.head.key_size, dv = m.config.head.value_size;
  auto lin = [](const nn::Linear& l, const Tensor& in) {  // (B, T, in) -> (B, T, out)
    Tensor y = matmul(in, transpose(l.weight, 0, 1));
    return l.bias.defined() ? y + l.bias : y;
  };
  auto q = lin(*m.q_proj, x).to_vector<double>(), k = lin(*m.k_proj, ctx).to_vector<double>();
  auto v = lin(*m.v_proj, ctx).to_vector<double>();
  std::vector<double> pre = m.pre_mix.defined() ? m.pre_mix.to_vector<double>() : std::vector<double>();
  std::vector<double> post = m.post_mix.defined() ? m.post_mix.to_vector<double>() : std::vector<double>();
  if (head_scale.empty()) head_scale = m.head_mask.to_vector<double>();
  std::vector<double> o(B * N * hv * dv, 0.0), w_all(B * h * N * M, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> J(hk * M), L(h * M, 0.0), W(h * M, 0.0), U(hv * M, 0.0);
      for (int64_t a = 0; a < hk; ++a)
        for (int64_t j = 0; j < M; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < dk; ++d) acc += q[(b * N + n) * hk * dk + a * dk + d] * k[(b * M + j) * hk * dk + a * dk + d];
          J[a * M + j] = acc / std::sqrt(double(dk));
        }
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < M; ++j) {
          if (pre.empty()) {
            L[i * M + j] = J[i * M + j];
          } else {
            for (int64_t a = 0; a < hk; ++a) L[i * M + j] += J[a * M + j] * pre[a * h + i];
          }
        }
      for (int64_t i = 0; i < h; ++i) {
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < M; ++j)
          if (allowed[(b * N + n) * M + j]) mx = std::max(mx, L[i * M + j]);
        for (int64_t j = 0; j < M; ++j)
          if (allowed[(b * N + n) * M + j]) z += std::exp(L[i * M + j] - mx);
        for (int64_t j = 0; j < M; ++j) {
          W[i * M + j] = allowed[(b * N + n) * M + j] ? std::exp(L[i * M + j] - mx) / z : 0.0;
          w_all[((b * h + i) * N + n) * M + j] = W[i * M + j];
        }
      }
      for (int64_t vh = 0; vh < hv; ++vh)
        for (int64_t j = 0; j < M; ++j) {
          if (post.empty()) {
            U[vh * M + j] = W[vh * M + j];
          } else {
            for (int64_t i = 0; i < h; ++i) U[vh * M + j] += W[i * M + j] * post[i * hv + vh];
          }
        }
      for (int64_t vh = 0; vh < hv; ++vh)
        for (int64_t j = 0; j < M; ++j)
          for (int64_t d = 0; d < dv; ++d)
            o[(b * N + n) * hv * dv + vh * dv + d] += head_scale[vh] * U[vh * M + j] * v[(b * M + j) * hv * dv + vh * dv + d];
    }
  return {lin(*m.out_proj, from_vector(o, {B, N, hv * dv})), from_vector(w_all, {B, h, N, M})};
}

std::vector<bool> all_allowed(int64_t B, int64_t N, int64_t M) { return std::vector<bool>(B * N * M, true); }

TEST_CASE("talking_heads matches a naive loop implementation for hk != h != hv and mixes on or off") {
  for (std::string spec : {"talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=5)",
                           "talking_heads(heads=4, logit_heads=2, value_heads=3)",
                           "talking_heads(heads=2, pre=false, value_heads=3)",
                           "talking_heads(heads=2, logit_heads=3, post=false)",
                           "talking_heads(heads=2, pre=false, post=false, bias=false)"}) {
    CAPTURE(spec);
    auto a = th64(spec);
    auto& m = as_th(a);
    randomize_mixes(m, 11);
    Generator g(1);
    Tensor x = randn({2, 4, 8}, g, kFloat64);
    auto r = a->forward(x, {}, {}, false, true);
    auto ref = naive_th(m, x, x, all_allowed(2, 4, 4));
    CHECK(allclose(r.output, ref.output, 1e-10, 1e-12));
    // the returned attention is W, the h softmax heads before the post mix
    CHECK(allclose(r.attention, ref.w, 1e-10, 1e-12));
  }
}

TEST_CASE("talking_heads causal, padding mask with fully masked rows, cross-attention") {
  auto a = th64("talking_heads(heads=2, logit_heads=3, value_heads=4)");
  auto& m = as_th(a);
  randomize_mixes(m, 12);
  Generator g(2);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 3, 8}, g, kFloat64);
  // causal
  std::vector<bool> causal(2 * 4 * 4);
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 4; ++j) causal[(b * 4 + n) * 4 + j] = j <= n;
  CHECK(allclose(a->forward(x, {}, {}, true).output, naive_th(m, x, x, causal).output, 1e-10, 1e-12));
  // (B, 1, N, M) mask on cross-attention: example 0's query row 2 and all of example 1 see nothing
  std::vector<bool> allowed(2 * 4 * 3);
  for (int b = 0; b < 2; ++b)
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 3; ++j) allowed[(b * 4 + n) * 3 + j] = b == 0 && n != 2 && (j + n) % 3 != 1;
  Tensor mask = from_vector<bool>(allowed, {2, 1, 4, 3});
  auto r = a->forward(x, ctx, mask, false, true);
  auto ref = naive_th(m, x, ctx, allowed);
  CHECK(allclose(r.output, ref.output, 1e-10, 1e-12));
  CHECK(allclose(r.attention, ref.w, 1e-10, 1e-12));
  CHECK(r.attention.shape() == Dims{2, 2, 4, 3});
  for (double p : narrow(r.attention, 0, 1, 1).to_vector<double>()) CHECK(p == 0.0);
  for (double p : narrow(narrow(r.attention, 0, 0, 1), 2, 2, 1).to_vector<double>()) CHECK(p == 0.0);
  // a masked query row gets out_proj's bias only: no NaN leaks through the mixes
  Tensor bias_row = broadcast_to(m.out_proj->bias, {4, 8});
  CHECK(allclose(select(r.output, 0, 1), bias_row, 0, 1e-14));
  // a per-softmax-head mask (1, h, N, M): head 1 fully masked gives a zero W_1 only
  Tensor head_mask = from_vector<bool>({true, true, true, true, true, true, true, true, true, true, true, true,
                                        false, false, false, false, false, false, false, false, false, false, false, false},
                                       {1, 2, 4, 3});
  Tensor w = a->forward(x, ctx, head_mask, false, true).attention;
  for (double p : narrow(w, 1, 1, 1).to_vector<double>()) CHECK(p == 0.0);
  CHECK(allclose(sum(narrow(w, 1, 0, 1), {-1}), ones({2, 1, 4}, kFloat64), 1e-12, 1e-12));
}

// Gradients of the output against the inputs and every parameter, in eval mode, under a padding
// mask with one fully masked query row; `cross` attends to a 5-row context, else to x itself.
void check_gradients(const std::shared_ptr<nn::Attention>& a, bool cross) {
  auto& m = as_th(a);
  a->eval();
  if (m.gate) {
    NoGradGuard ng;
    copy_(m.gate->log_alpha, from_vector<double>({-0.5, 0.3, 1.0}));  // inside the clamp's open range
  }
  std::vector<Tensor> inputs = {leaf64({2, 3, 8}, 3), leaf64({2, 5, 8}, 4)};
  for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
  // (B, 1, N, M) padding mask; example 1's query row 0 has no allowed key
  Tensor mask = from_vector<bool>({true, true, false, true, true,  true, false, true, true, true,
                                   true, true, true, false, true,  false, false, false, false, false,
                                   true, true, false, true, true,  false, true, true, true, true},
                                  {2, 1, 3, 5});
  Tensor self_mask = narrow(mask, 3, 0, 3);  // (2, 1, 3, 3), the same fully masked row
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return cross ? a->forward(in[0], in[1], mask).output : a->forward(in[0], {}, self_mask).output;
      },
      inputs);
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace

TEST_CASE("talking_heads gradcheck: every option combination") {
  struct Case {
    std::string spec;
    bool cross;
  };
  for (const Case& cs : {Case{"talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=2)", true},
                         Case{"talking_heads(heads=2, pre=false, value_heads=3)", true},
                         Case{"talking_heads(heads=2, logit_heads=3, post=false)", true},
                         Case{"talking_heads(heads=2, pre=false, post=false, bias=false)", true},
                         Case{"talking_heads(heads=2, logit_heads=3, value_heads=4, causal=true)", false},
                         Case{"talking_heads(heads=2, logit_heads=4, value_heads=3, gate=hard_concrete)", true}}) {
    CAPTURE(cs.spec);
    auto a = th64(cs.spec);
    randomize_mixes(as_th(a), 13);
    check_gradients(a, cs.cross);
  }
}

TEST_CASE("talking_heads with identity mixes and hk = h = hv equals mha exactly") {
  for (std::string opts : {"heads=2, key_size=3, value_size=5", "heads=2, gate=hard_concrete", "heads=4, bias=false"}) {
    CAPTURE(opts);
    for (std::string mixes : {"", ", pre=false", ", post=false", ", pre=false, post=false"}) {
      CAPTURE(mixes);
      auto th = th64("talking_heads(" + opts + mixes + ")");
      auto mha = th64("mha(" + opts + ")");
      auto& m = as_th(th);
      if (m.pre_mix.defined()) CHECK(allclose(m.pre_mix, eye(m.config.head.heads, kFloat64), 0, 0));
      if (m.post_mix.defined()) CHECK(allclose(m.post_mix, eye(m.config.head.heads, kFloat64), 0, 0));
      TensorMap state = th->state_dict();
      state.erase("pre_mix");
      state.erase("post_mix");
      mha->load_state_dict(state);  // strict: every projection (and gate) tensor is copied
      th->eval();
      mha->eval();
      Generator g(5);
      Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 3, 8}, g, kFloat64);
      Tensor mask = from_vector<bool>({true, false, true, false, false, false}, {2, 1, 1, 3});
      auto a = th->forward(x, ctx, mask, false, true), b = mha->forward(x, ctx, mask, false, true);
      CHECK(allclose(a.output, b.output, 0, 0));
      CHECK(allclose(a.attention, b.attention, 0, 0));
      // Without need_weights mha takes its fused tiled kernel: the same sums in another order.
      CHECK(allclose(th->forward(x, {}, {}, true).output, mha->forward(x, {}, {}, true).output, 1e-12, 1e-13));
      CHECK(allclose(th->forward(x, {}, {}, true, true).output, mha->forward(x, {}, {}, true, true).output, 0, 0));
    }
  }
}

TEST_CASE("talking_heads gates and head_mask act on the value heads") {
  auto a = th64("talking_heads(heads=2, logit_heads=3, value_heads=4, gate=hard_concrete)");
  auto& m = as_th(a);
  randomize_mixes(m, 14);
  a->eval();
  CHECK(m.gate->log_alpha.shape() == Dims{4});
  CHECK(m.head_mask.shape() == Dims{4});
  {
    NoGradGuard ng;
    copy_(m.gate->log_alpha, from_vector<double>({-0.5, 0.3, 1.0, 10.0}));
    copy_(m.head_mask, from_vector<double>({1, 1, 0, 1}));
  }
  std::vector<double> scale;
  for (double la : {-0.5, 0.3, 1.0, 10.0}) scale.push_back(std::clamp(1.2 / (1 + std::exp(-la)) - 0.1, 0.0, 1.0));
  scale[2] = 0;
  Generator g(6);
  Tensor x = randn({2, 3, 8}, g, kFloat64);
  CHECK(allclose(a->forward(x).output, naive_th(m, x, x, all_allowed(2, 3, 3), scale).output, 1e-10, 1e-12));
  // head importance |dL/d head_mask| per value head
  m.head_mask.requires_grad_();
  sum(a->forward(x).output).backward();
  REQUIRE(m.head_mask.grad().defined());
  CHECK(m.head_mask.grad().shape() == Dims{4});
}

TEST_CASE("talking_heads attn_dropout acts on W and the returned attention is W before dropout") {
  auto a = th64("talking_heads(heads=2, logit_heads=3, value_heads=4, attn_dropout=0.5)");
  Generator g(7);
  Tensor x = randn({2, 5, 8}, g, kFloat64);
  a->eval();
  auto e = a->forward(x, {}, {}, false, true);
  a->train();
  auto t = a->forward(x, {}, {}, false, true);
  CHECK(allclose(t.attention, e.attention, 0, 0));
  CHECK_FALSE(allclose(t.output, e.output, 1e-6, 1e-6));
}

TEST_CASE("talking_heads pruned layer equals the masked one") {
  SUBCASE("post=true, hk != h != hv, gated") {
    auto a = th64("talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, gate=hard_concrete)");
    auto& m = as_th(a);
    randomize_mixes(m, 15);
    a->eval();
    Generator g(8);
    {
      NoGradGuard ng;
      copy_(m.gate->log_alpha, randn({4}, g, kFloat64));
      copy_(m.head_mask, from_vector<double>({0, 1, 0, 1}));
    }
    Tensor x = randn({2, 5, 8}, g, kFloat64);
    Tensor masked = a->forward(x).output;
    auto p = a->prune_heads({3, 1});
    auto& pm = as_th(p);
    CHECK(pm.config.value_heads == 2);
    CHECK(pm.config.logit_heads == 3);
    CHECK(pm.config.head.heads == 2);
    CHECK(pm.q_proj->weight.shape() == Dims{9, 8});
    CHECK(pm.v_proj->weight.shape() == Dims{8, 8});
    CHECK(pm.out_proj->weight.shape() == Dims{8, 8});
    CHECK(pm.post_mix.shape() == Dims{2, 2});
    CHECK(pm.gate->log_alpha.shape() == Dims{2});
    CHECK(allclose(p->forward(x).output, masked, 1e-10, 1e-12));
    CHECK(error_of([&] { a->prune_heads({0, 4}); }).find("out of range") != std::string::npos);
    CHECK(error_of([&] { a->prune_heads({1, 1}); }).find("twice") != std::string::npos);
  }
  SUBCASE("post=false becomes post=true with identity columns") {
    auto a = th64("talking_heads(heads=4, logit_heads=3, post=false)");
    auto& m = as_th(a);
    randomize_mixes(m, 16);
    {
      NoGradGuard ng;
      copy_(m.head_mask, from_vector<double>({0, 1, 1, 0}));
    }
    Generator g(9);
    Tensor x = randn({2, 5, 8}, g, kFloat64);
    auto p = a->prune_heads({1, 2});
    auto& pm = as_th(p);
    CHECK(pm.config.post);
    CHECK(pm.post_mix.shape() == Dims{4, 2});
    CHECK(allclose(pm.post_mix, t64({0, 0, 1, 0, 0, 1, 0, 0}, {4, 2}), 0, 0));
    CHECK(allclose(p->forward(x).output, a->forward(x).output, 1e-10, 1e-12));
  }
  SUBCASE("sizes that defaulted from h are pinned in the pruned spec") {
    auto a = th64("talking_heads(heads=2, value_heads=4)");
    auto& m = as_th(a);
    randomize_mixes(m, 17);
    {
      NoGradGuard ng;
      copy_(m.head_mask, from_vector<double>({0, 1, 0, 1}));
    }
    auto p = a->prune_heads({1, 3});
    CHECK(p->spec() ==
          "talking_heads(heads=2, logit_heads=2, value_heads=2, key_size=4, value_size=4, pre=true, post=true, "
          "mix_init=identity, bias=true, causal=false, attn_dropout=0)");
    auto rebuilt = make_attention(p->spec(), 8);
    rebuilt->to(kFloat64);
    rebuilt->load_state_dict(p->state_dict());  // strict: same names and shapes
    Generator g(10);
    Tensor x = randn({1, 4, 8}, g, kFloat64);
    CHECK(allclose(rebuilt->forward(x).output, a->forward(x).output, 1e-10, 1e-12));
  }
}

TEST_CASE("talking_heads mixes start as the identity when square, else normal(0, 1/sqrt(rows))") {
  manual_seed(3);
  auto sq = make_attention("talking_heads(heads=4)", 8);
  CHECK(allclose(as_th(sq).pre_mix, eye(4), 0, 0));
  CHECK(allclose(as_th(sq).post_mix, eye(4), 0, 0));
  auto a = make_attention("talking_heads(heads=32, logit_heads=64, value_heads=16)", 32);
  auto stats = [](const Tensor& t) {
    auto v = t.to_vector<double>();
    double s = 0, s2 = 0;
    for (double e : v) s += e, s2 += e * e;
    double mean = s / v.size();
    return std::pair{mean, std::sqrt(s2 / v.size() - mean * mean)};
  };
  auto [pre_mean, pre_std] = stats(as_th(a).pre_mix);  // (64, 32): std 1/8
  auto [post_mean, post_std] = stats(as_th(a).post_mix);  // (32, 16): std 1/sqrt(32)
  CHECK(as_th(a).pre_mix.shape() == Dims{64, 32});
  CHECK(as_th(a).post_mix.shape() == Dims{32, 16});
  CHECK(std::abs(pre_mean) < 0.02);
  CHECK(pre_std == doctest::Approx(1.0 / 8).epsilon(0.1));
  CHECK(std::abs(post_mean) < 0.03);
  CHECK(post_std == doctest::Approx(1.0 / std::sqrt(32.0)).epsilon(0.15));
}

TEST_CASE("talking_heads mix_init=random: square mixes start normal(0, 1/sqrt(rows)), not the identity") {
  auto draw = [](uint64_t seed) {
    manual_seed(seed);
    return make_attention("talking_heads(heads=32, mix_init=random)", 32);
  };
  auto a = draw(3), b = draw(3), c = draw(4);
  auto& m = as_th(a);
  CHECK(m.pre_mix.shape() == Dims{32, 32});
  CHECK_FALSE(allclose(m.pre_mix, eye(32), 0.1, 0.1));
  CHECK_FALSE(allclose(m.post_mix, eye(32), 0.1, 0.1));
  CHECK_FALSE(allclose(m.pre_mix, m.post_mix, 0.1, 0.1));  // two draws, not one mix twice
  // the same seed gives the same mixes, another seed other ones
  CHECK(allclose(m.pre_mix, as_th(b).pre_mix, 0, 0));
  CHECK(allclose(m.post_mix, as_th(b).post_mix, 0, 0));
  CHECK_FALSE(allclose(m.pre_mix, as_th(c).pre_mix, 0.1, 0.1));
  for (const Tensor& mix : {m.pre_mix, m.post_mix}) {
    auto v = mix.to_vector<double>();  // 1024 draws of std 1/sqrt(32)
    double s = 0, s2 = 0;
    for (double e : v) s += e, s2 += e * e;
    const double mean = s / v.size();
    CHECK(std::abs(mean) < 0.02);
    CHECK(std::sqrt(s2 / v.size() - mean * mean) == doctest::Approx(1.0 / std::sqrt(32.0)).epsilon(0.1));
  }
  // non-square mixes are drawn as with the identity init
  auto ns = make_attention("talking_heads(heads=2, logit_heads=3, value_heads=4, mix_init=random)", 8);
  CHECK(as_th(ns).pre_mix.shape() == Dims{3, 2});
  CHECK(as_th(ns).post_mix.shape() == Dims{2, 4});
  CHECK(as_th(ns).spec().find("post=true, mix_init=random,") != std::string::npos);
}

TEST_CASE("talking_heads mix_init=random: forward matches the naive loops and gradients check") {
  for (std::string spec : {"talking_heads(heads=2, mix_init=random)",
                           "talking_heads(heads=2, logit_heads=3, value_heads=4, mix_init=random)",
                           "talking_heads(heads=2, post=false, mix_init=random, bias=false)"}) {
    CAPTURE(spec);
    auto a = th64(spec);  // the mixes as drawn, not replaced by randomize_mixes
    auto& m = as_th(a);
    if (m.config.logit_heads == m.config.head.heads)
      CHECK_FALSE(allclose(m.pre_mix, eye(m.config.head.heads, kFloat64), 0.1, 0.1));
    Generator g(21);
    Tensor x = randn({2, 4, 8}, g, kFloat64);
    CHECK(allclose(a->forward(x).output, naive_th(m, x, x, all_allowed(2, 4, 4)).output, 1e-10, 1e-12));
    check_gradients(a, true);
  }
}

TEST_CASE("talking_heads mix_init: pruning keeps it, unknown values fail naming the option and the choices") {
  auto a = th64("talking_heads(heads=2, value_heads=4, mix_init=random)");
  {
    NoGradGuard ng;
    copy_(as_th(a).head_mask, from_vector<double>({1, 0, 1, 0}));
  }
  auto p = a->prune_heads({0, 2});
  CHECK(as_th(p).config.mix_init == "random");
  CHECK(p->spec().find("mix_init=random") != std::string::npos);
  Generator g(22);
  Tensor x = randn({1, 4, 8}, g, kFloat64);
  CHECK(allclose(p->forward(x).output, a->forward(x).output, 1e-10, 1e-12));

  auto bad = error_of([] { make_attention("talking_heads(heads=2, mix_init=eye)", 8); });
  CHECK(bad.find("talking_heads: option mix_init=eye: expected one of identity, random") != std::string::npos);
  nn::TalkingHeadsConfig c;
  c.head.heads = 2, c.head.key_size = 4, c.head.value_size = 4;
  c.logit_heads = 2, c.value_heads = 2;
  c.mix_init = "orthogonal";
  CHECK(error_of([&] { TalkingHeadsAttention(8, c); })
            .find("talking_heads: option mix_init=orthogonal: expected one of identity, random") != std::string::npos);
}

TEST_CASE("talking_heads spec errors name the variant and the options") {
  auto pre = error_of([] { make_attention("talking_heads(heads=2, logit_heads=3, pre=false)", 8); });
  CHECK(pre.find("talking_heads: pre=false needs logit_heads == heads") != std::string::npos);
  CHECK(pre.find("logit_heads=3 and heads=2") != std::string::npos);
  auto post = error_of([] { make_attention("talking_heads(heads=2, value_heads=4, post=false)", 8); });
  CHECK(post.find("talking_heads: post=false needs value_heads == heads") != std::string::npos);
  CHECK(post.find("value_heads=4 and heads=2") != std::string::npos);
  CHECK_NOTHROW(make_attention("talking_heads(heads=2, value_heads=4, pre=false)", 8));
  CHECK(error_of([] { make_attention("talking_heads(logit_heads=0)", 8); })
            .find("talking_heads: option logit_heads=0: must be positive") != std::string::npos);
  CHECK(error_of([] { make_attention("talking_heads(value_heads=-1)", 8); })
            .find("option value_heads=-1: must be positive") != std::string::npos);
  // dk and dv default from the softmax heads h, whatever hk and hv are
  CHECK(error_of([] { make_attention("talking_heads(heads=3, logit_heads=4, value_heads=4)", 8); })
            .find("heads=3 does not divide d_model=8") != std::string::npos);
  auto unknown = error_of([] { make_attention("talking_heads(logit_head=2)", 8); });
  CHECK(unknown.find("talking_heads: unknown option logit_head") != std::string::npos);
  CHECK(unknown.find("logit_heads") != std::string::npos);
  CHECK(error_of([] { make_attention("talking_heads(pre=maybe)", 8); }).find("true or false") != std::string::npos);
  auto a = make_attention("talking_heads(heads=2)", 8);
  CHECK(error_of([&] { a->forward(zeros({1, 3, 8}), zeros({1, 2, 8}), {}, true); })
            .find("talking_heads: causal attention needs self-attention") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 3, 6})); }).find("input must be (B, N, 8)") != std::string::npos);
}

TEST_CASE("talking_heads parameter names and shapes follow the spec") {
  auto names_of = [](const std::shared_ptr<nn::Attention>& a) {
    std::vector<std::string> names;
    for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
    return names;
  };
  auto a = make_attention(
      "talking_heads(heads=2, logit_heads=3, value_heads=4, key_size=3, value_size=5, gate=hard_concrete)", 8);
  CHECK(names_of(a) == std::vector<std::string>{"pre_mix(3,2)", "post_mix(2,4)", "q_proj.weight(9,8)",
                                                "q_proj.bias(9)", "k_proj.weight(9,8)", "k_proj.bias(9)",
                                                "v_proj.weight(20,8)", "v_proj.bias(20)", "out_proj.weight(8,20)",
                                                "out_proj.bias(8)", "gate.log_alpha(4)"});
  auto bufs = a->named_buffers();
  REQUIRE(bufs.size() == 1);
  CHECK(bufs[0].first == "head_mask");
  CHECK(bufs[0].second.shape() == Dims{4});
  auto off = make_attention("talking_heads(heads=2, pre=false, post=false, bias=false)", 8);
  CHECK(names_of(off) == std::vector<std::string>{"q_proj.weight(8,8)", "k_proj.weight(8,8)", "v_proj.weight(8,8)",
                                                  "out_proj.weight(8,8)"});
  // the schema lists the variant's own options with their defaults
  bool found = false;
  for (const auto& v : nn::variants())
    if (v.schema.name == "talking_heads") {
      found = true;
      std::vector<std::string> opts;
      for (const auto& o : v.schema.options) opts.push_back(o.name);
      CHECK(std::vector<std::string>(opts.begin(), opts.begin() + 8) ==
            std::vector<std::string>{"heads", "logit_heads", "value_heads", "key_size", "value_size", "pre", "post",
                                     "mix_init"});
      CHECK(v.schema.options[7].default_value == "identity");
      CHECK(v.schema.options[7].choices == std::vector<std::string>{"identity", "random"});
    }
  CHECK(found);
}

// The example in docs/attention.md, compiled and run.
TEST_CASE("talking_heads doc example") {
  manual_seed(0);
  auto attn = nn::make_attention("talking_heads(heads=4, logit_heads=6, value_heads=8)", 32);
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);                     // (B, N, D)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;                                    // (2, 10, 32)
  Tensor w = r.attention;                                 // (2, 4, 10, 10): the softmax heads
  sum(y).backward();
  auto pruned = attn->prune_heads({0, 2, 5});             // keeps value heads 0, 2, 5
  CHECK(y.shape() == Dims{2, 10, 32});
  CHECK(w.shape() == Dims{2, 4, 10, 10});
  CHECK(as_th(attn).pre_mix.grad().shape() == Dims{6, 4});
  CHECK(as_th(pruned).v_proj->weight.shape() == Dims{24, 32});
}

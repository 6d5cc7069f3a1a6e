// nystrom (docs/attention.md, "nystrom"): a dense twin of the documented formulas (output and the
// returned F pinv(A) Bm), the landmarks = N identity with a stated convergence bound, gradients
// for every option, key masks (a fully masked key set gives zero head outputs), pruning,
// errors, parameter names and init, and the docs example.
#include "helpers.hpp"
#include "lowrank_helpers.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/nystrom.hpp"
#include "tensor/lapack.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::lowrank;

namespace {

// Z0 = A^T / (max col sum * max row sum); Z <- 0.25 Z (13 I - AZ (15 I - AZ (7 I - AZ))).
Vec pinv(const Vec& a, int64_t m, int64_t iters) {
  double col = 0, row = 0;
  for (int64_t i = 0; i < m; ++i) {
    double c = 0, r = 0;
    for (int64_t j = 0; j < m; ++j) c += std::abs(a[j * m + i]), r += std::abs(a[i * m + j]);
    col = std::max(col, c), row = std::max(row, r);
  }
  Vec z = tr(a, m, m);
  for (double& e : z) e /= col * row;
  auto minus_from = [&](double c, const Vec& t) {  // c I - t
    Vec out(m * m);
    for (int64_t i = 0; i < m * m; ++i) out[i] = (i % (m + 1) == 0 ? c : 0.0) - t[i];
    return out;
  };
  for (int64_t it = 0; it < iters; ++it) {
    Vec az = mm(a, z, m, m, m);
    Vec inner = mm(az, minus_from(7, az), m, m, m);
    inner = mm(az, minus_from(15, inner), m, m, m);
    z = mm(z, minus_from(13, inner), m, m, m);
    for (double& e : z) e *= 0.25;
  }
  return z;
}

// Means of t (L, d) over m segments of L/m consecutive rows.
Vec segment_means(const Vec& t, int64_t L, int64_t d, int64_t m) {
  Vec out(m * d, 0.0);
  for (int64_t r = 0; r < L; ++r)
    for (int64_t c = 0; c < d; ++c) out[(r / (L / m)) * d + c] += t[r * d + c] / double(L / m);
  return out;
}

struct Twin {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, M): F pinv(A) Bm
};

// The documented formulas written out densely: att = F Z Bm (N x M), O = att V (+ conv of V).
Twin naive_nystrom(const nn::NystromAttention& l, const Tensor& x, const Tensor& ctx_or_empty, const Tensor& mask) {
  const bool self = !ctx_or_empty.defined();
  const Tensor& ctx = self ? x : ctx_or_empty;
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1), h = l.config.heads;
  const int64_t dk = l.config.key_size, dv = l.config.value_size, m = l.settings.landmarks;
  const double scale = 1.0 / std::sqrt(double(dk));
  auto allowed = key_allowed(mask, B, h, M);
  std::vector<std::vector<Vec>> o(B, std::vector<Vec>(h));
  Vec att_all;
  for (int64_t b = 0; b < B; ++b) {
    Vec q = linear(*l.q_proj, batch(x, b), N), k = linear(*l.k_proj, batch(ctx, b), M);
    Vec v = linear(*l.v_proj, batch(ctx, b), M);
    for (int64_t i = 0; i < h; ++i) {
      Vec qi = head(q, N, h * dk, i, dk), ki = head(k, M, h * dk, i, dk), vi = head(v, M, h * dv, i, dv);
      for (int64_t r = 0; r < M; ++r)
        if (!allowed[b][i][r]) {
          for (int64_t c = 0; c < dk; ++c) ki[r * dk + c] = 0;
          for (int64_t c = 0; c < dv; ++c) vi[r * dv + c] = 0;
          if (self)
            for (int64_t c = 0; c < dk; ++c) qi[r * dk + c] = 0;
        }
      Vec ql = segment_means(qi, N, dk, m), kl = segment_means(ki, M, dk, m);
      Vec f = softmax_rows(scores(qi, kl, N, m, dk, scale), N, m);
      Vec a = softmax_rows(scores(ql, kl, m, m, dk, scale), m, m);
      Vec bm = softmax_rows(scores(ql, ki, m, M, dk, scale), m, M, allowed[b][i]);
      Vec att = mm(mm(f, pinv(a, m, l.settings.pinv_iters), N, m, m), bm, N, m, M);  // (N, M)
      o[b][i] = mm(att, vi, N, M, dv);
      if (l.conv) {
        Vec w = l.conv->weight.to_vector<double>();
        const int64_t kk = l.settings.conv, left = (kk - 1) / 2;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t t = 0; t < kk; ++t) {
            const int64_t src = n + t - left;
            if (src < 0 || src >= N) continue;
            for (int64_t c = 0; c < dv; ++c) o[b][i][n * dv + c] += w[i * kk + t] * vi[src * dv + c];
          }
      }
      att_all.insert(att_all.end(), att.begin(), att.end());
    }
  }
  return {finish(l, o, N), from_vector(att_all, {B, h, N, M})};
}

double frobenius(const Vec& a) {
  double s = 0;
  for (double e : a) s += e * e;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("nystrom matches its dense twin: output and F pinv(A) Bm, self, cross-attention, key masks, conv") {
  Generator g(1);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 6, 8}, g, kFloat64);
  // batch 1 masks every key: its head outputs are 0 and its attention rows too
  Tensor pad4 = from_vector<bool>({true, false, true, true, false, false, false, false}, {2, 1, 1, 4});
  Tensor pad6 = from_vector<bool>({true, true, false, true, false, true, false, false, false, false, false, false},
                                  {2, 1, 1, 6});
  Tensor per_head = from_vector<bool>({true, false, true, true, false, true, true, true}, {1, 2, 1, 4});
  for (std::string spec : {"nystrom(heads=2, landmarks=2)", "nystrom(heads=2, landmarks=2, conv=3)",
                           "nystrom(heads=2, landmarks=4, conv=2, pinv_iters=3, key_size=3, value_size=5)",
                           "nystrom(heads=2, landmarks=1, bias=false)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    auto& l = static_cast<nn::NystromAttention&>(*a);
    for (const Tensor& mask : {Tensor(), pad4, per_head}) {
      auto r = a->forward(x, {}, mask, false, true);
      Twin t = naive_nystrom(l, x, {}, mask);
      CHECK(allclose(r.output, t.output, 1e-10, 1e-12));
      CHECK(allclose(r.attention, t.attention, 1e-10, 1e-12));
    }
    Tensor y = a->forward(x, {}, pad4).output;
    Tensor bias = l.out_proj->bias.defined() ? l.out_proj->bias : zeros({8}, kFloat64);
    for (int64_t n = 0; n < 4; ++n) CHECK(max_diff(select(select(y, 0, 1), 0, n), bias) == 0.0);
    if (!l.conv && l.settings.landmarks <= 2) {
      auto r = a->forward(x, ctx, pad6, false, true);
      Twin t = naive_nystrom(l, x, ctx, pad6);
      CHECK(allclose(r.output, t.output, 1e-10, 1e-12));
      CHECK(allclose(r.attention, t.attention, 1e-10, 1e-12));
      for (double e : narrow(r.attention, 0, 1, 1).to_vector<double>()) CHECK(e == 0.0);
    }
  }
}

TEST_CASE("nystrom with landmarks = N converges to mha: |O_i - P_i V_i| <= f^k(e0) |P_i V_i|") {
  // With m = N the segments are single rows, so q~ = q, k~ = k and F = A = Bm = P (mha's
  // probabilities): O = P Z_k P V. With E_k = I - P Z_k, O - P V = -E_k P V. Z0 = alpha P^T,
  // alpha = 1/(|P|_1 |P|_inf), so E0 = I - alpha P P^T is symmetric with eigenvalues in
  // [0, e0], e0 = 1 - alpha lambda_min(P P^T) < 1 (sigma_max^2 <= |P|_1 |P|_inf). One step maps
  // E to f(E) = E^3 (3 I + E) / 4 (expand A Z' = g(AZ)), increasing on [0, 1), hence
  //   |O_i - P_i V_i|_F <= |E_k|_2 |P_i V_i|_F = f^k(e0) |P_i V_i|_F
  // with f^k(e0) <= e0^(3^k): cubic convergence. Tested for k = 0..7 (plus 1e-12 rounding).
  const int64_t N = 4, h = 2, dv = 4;
  // A P that is not nearly singular (random small layers give almost uniform rows, e0 ~ 1):
  // x[n] ~ e_n + e_{4+n} plus noise, k = x W_k with W_k ~ identity plus noise, q = 3 k, so each
  // head's scores favour the diagonal by ~1.5 and P ~ 0.6 I + 0.13 (1 1^T - I), perturbed.
  Generator g(2);
  Tensor x = eye(N, 8, kFloat64) + narrow(eye(8, kFloat64), 0, 4, 4) + randn({N, 8}, g, kFloat64, 0, 0.2);
  x = unsqueeze(x, 0);  // (1, N, 8)
  auto mha = layer64("mha(heads=2)", 8, 11);
  {
    NoGradGuard ng;
    auto& m = static_cast<nn::MultiHeadAttention&>(*mha);
    Tensor wk = eye(8, kFloat64) + randn({8, 8}, g, kFloat64, 0, 0.1);  // head i reads x's block i
    copy_(m.k_proj->weight, wk);
    copy_(m.q_proj->weight, wk * 3.0);
    zero_(m.k_proj->bias);
    zero_(m.q_proj->bias);
    copy_(m.out_proj->weight, eye(8, kFloat64));  // the output is the heads' outputs, concatenated
    zero_(m.out_proj->bias);
  }
  auto ref = mha->forward(x, {}, {}, false, true);
  const Vec pv_all = ref.output.to_vector<double>();  // (N, h*dv): P_i V_i
  const Vec p_all = ref.attention.to_vector<double>();
  std::vector<double> e0(h), pv_norm(h);
  for (int64_t i = 0; i < h; ++i) {
    Vec p(p_all.begin() + i * N * N, p_all.begin() + (i + 1) * N * N);
    double n1 = 0, ninf = 0;
    for (int64_t r = 0; r < N; ++r) {
      double c = 0, s = 0;
      for (int64_t j = 0; j < N; ++j) c += p[j * N + r], s += p[r * N + j];
      n1 = std::max(n1, c), ninf = std::max(ninf, s);
    }
    Vec ev = lapack::symmetric_eigenvalues(mm(p, tr(p, N, N), N, N, N), N);
    e0[i] = 1 - *std::min_element(ev.begin(), ev.end()) / (n1 * ninf);
    pv_norm[i] = frobenius(head(pv_all, N, h * dv, i, dv));
    INFO("head " << i << ": e0 = " << e0[i]);
    REQUIRE(e0[i] < 0.99);
  }
  for (int64_t k = 0; k <= 7; ++k) {
    CAPTURE(k);
    auto a = layer64(fmt::format("nystrom(heads=2, landmarks={}, pinv_iters={})", N, k), 8);
    a->load_state_dict(mha->state_dict());
    Vec o = a->forward(x).output.to_vector<double>();
    for (int64_t i = 0; i < h; ++i) {
      double bound = e0[i];
      for (int64_t t = 0; t < k; ++t) bound = bound * bound * bound * (3 + bound) / 4;
      Vec diff = head(o, N, h * dv, i, dv), pv = head(pv_all, N, h * dv, i, dv);
      for (size_t j = 0; j < diff.size(); ++j) diff[j] -= pv[j];
      CAPTURE(i);
      CAPTURE(bound);
      CHECK(frobenius(diff) <= bound * pv_norm[i] + 1e-12);
      if (k == 7) CHECK(frobenius(diff) < 1e-10);
    }
  }
}

TEST_CASE("nystrom gradcheck: self, cross-attention with a padding mask, conv with a mask, bias=false, gated") {
  Tensor pad4 = from_vector<bool>({true, false, true, true, false, false, false, false}, {2, 1, 1, 4});
  for (std::string spec : {"nystrom(heads=2, landmarks=2)", "nystrom(heads=2, landmarks=2, conv=3)",
                           "nystrom(heads=2, landmarks=2, conv=2, bias=false, key_size=3)",
                           "nystrom(heads=2, landmarks=4, pinv_iters=3, gate=hard_concrete)"}) {
    CAPTURE(spec);
    auto a = layer64(spec, 8);
    const bool conv = spec.find("conv") != std::string::npos;
    Generator g(3);
    Tensor x = randn({2, 4, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 4, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& p : params(*a)) inputs.push_back(p);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, pad4).output; }, inputs);
    CHECK_MESSAGE(self.ok, self.message);
    if (!conv) {
      auto cross =
          gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], pad4).output; }, inputs);
      CHECK_MESSAGE(cross.ok, cross.message);
      auto plain = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0]).output; }, inputs);
      CHECK_MESSAGE(plain.ok, plain.message);
    }
  }
}

TEST_CASE("nystrom errors: causal, lengths not multiples of landmarks, context with conv, non-key masks, dropout") {
  CHECK(error_of([] { nn::make_attention("nystrom(causal=true)", 8); }).find("nystrom: option causal=true") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("nystrom(attn_dropout=0.1)", 8); }).find("attn_dropout") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("nystrom(landmarks=0)", 8); }).find("landmarks") != std::string::npos);
  auto a = layer64("nystrom(heads=2, landmarks=2)", 8);
  auto c = layer64("nystrom(heads=2, landmarks=2, conv=3)", 8);
  Tensor x = zeros({1, 4, 8}, kFloat64);
  CHECK(error_of([&] { a->forward(x, {}, {}, true); }).find("nystrom: causal") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 5, 8}, kFloat64)); }).find("multiples of landmarks=2") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, zeros({1, 3, 8}, kFloat64)); }).find("key length 3") != std::string::npos);
  CHECK(error_of([&] { c->forward(x, x); }).find("conv=3 needs self-attention") != std::string::npos);
  CHECK_NOTHROW(a->forward(x, zeros({1, 6, 8}, kFloat64)));
  Tensor per_query = from_vector<bool>(std::vector<bool>(16, true), {1, 1, 4, 4});
  CHECK(error_of([&] { a->forward(x, {}, per_query); }).find("only key masks") != std::string::npos);
}

TEST_CASE("nystrom parameter names, shapes and init follow the spec and the authors' code") {
  manual_seed(6);
  auto a = nn::make_attention("nystrom(heads=2, conv=9)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(8,8)", "q_proj.bias(8)", "k_proj.weight(8,8)",
                                          "k_proj.bias(8)", "v_proj.weight(8,8)", "v_proj.bias(8)",
                                          "out_proj.weight(8,8)", "out_proj.bias(8)", "conv.weight(2,1,9,1)"});
  double mx = 0;  // kaiming_uniform_(a = sqrt(5)), fan_in = k: U(-1/3, 1/3)
  for (double e : a->get_parameter("conv.weight").to_vector<double>()) mx = std::max(mx, std::abs(e));
  CHECK(mx <= 1.0 / 3.0);
  CHECK(mx > 0.2);
  CHECK(nn::make_attention("nystrom(heads=2)", 8)->named_parameters().size() == 8);
  CHECK(nn::make_attention(a->spec(), 8)->spec() == a->spec());
}

TEST_CASE("docs/attention.md: the nystrom example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("nystrom(heads=4, landmarks=16, conv=33)", 32);
  Generator gen(1);
  Tensor x = randn({2, 256, 32}, gen);                      // (B, N, D), N a multiple of landmarks
  Tensor y = attn->forward(x).output;                       // (2, 256, 32), O(N m) per head
  sum(y).backward();
  auto r = attn->forward(narrow(x, 1, 0, 32), {}, {}, false, /*need_weights=*/true);
  Tensor p = r.attention;                                   // (2, 4, 32, 32): F pinv(A) Bm, densified
  CHECK(y.shape() == Dims{2, 256, 32});
  CHECK(p.shape() == Dims{2, 4, 32, 32});
}

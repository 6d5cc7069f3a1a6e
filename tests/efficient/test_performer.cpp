// performer (docs/attention.md, "performer"; Choromanski et al. 2021, FAVOR+): the layer against
// plain loops of the unshifted formula, the stabilising shift (eps rescaled), convergence to
// exact softmax attention as the features grow, the orthogonal projection and its redraws,
// gradchecks, pruning, errors, the golden cases and the docs example.
#include "kernelmix_testing.hpp"
#include "nn/attention/performer.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::kernelmix;
using nn::make_attention;

namespace {

nn::Performer& performer(const std::shared_ptr<nn::Attention>& a) { return dynamic_cast<nn::Performer&>(*a); }

// phi(z) = exp(W z' - ||z'||^2 / 2) / sqrt(m), z' = z / dk^(1/4): unshifted, as docs/attention.md writes it.
FeatureMap favor(const Tensor& projection) {
  const int64_t m = projection.size(0), dk = projection.size(1);
  auto w = projection.to_vector<double>();
  return [=](const std::vector<double>& z) {
    const double s = std::pow(double(dk), -0.25);
    double sq = 0;
    for (double v : z) sq += v * s * v * s;
    std::vector<double> out(m);
    for (int64_t j = 0; j < m; ++j) {
      double e = 0;
      for (int64_t i = 0; i < dk; ++i) e += w[j * dk + i] * z[i] * s;
      out[j] = std::exp(e - sq / 2) / std::sqrt(double(m));
    }
    return out;
  };
}

Allowed mask_fn(const Tensor& mask, bool causal) {
  if (!mask.defined()) return [causal](int64_t, int64_t, int64_t n, int64_t m) { return !causal || m <= n; };
  auto mv = mask.to_vector<bool>();
  Dims s = mask.shape();
  return [=](int64_t b, int64_t i, int64_t n, int64_t m) {
    if (causal && m > n) return false;
    int64_t bb = s[0] == 1 ? 0 : b, ii = s[1] == 1 ? 0 : i, nn_ = s[2] == 1 ? 0 : n;
    return bool(mv[((bb * s[1] + ii) * s[2] + nn_) * s[3] + m]);
  };
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

double mean_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += std::abs(x[i] - y[i]);
  return s / x.size();
}

}  // namespace

TEST_CASE("performer equals the unshifted formula by plain loops: self, causal, masks, cross, empty rows") {
  const int64_t B = 2, N = 5, M = 4, D = 8;
  Generator g(21);
  Tensor x = randn({B, N, D}, g, kFloat64), ctx = randn({B, M, D}, g, kFloat64);
  Tensor kpad = from_vector<bool>({true, true, true, false, true, false, false, true, true, true}, {B, 1, 1, N});
  Tensor cpad = from_vector<bool>({true, false, true, true, false, false, false, false}, {B, 1, 1, M});
  std::vector<bool> gm(B * N * N);
  auto u = rand({B * N * N}, g, kFloat64).to_vector<double>();
  for (size_t i = 0; i < gm.size(); ++i) gm[i] = u[i] < 0.6;
  for (int64_t m = 0; m < N; ++m) gm[(1 * N + 3) * N + m] = false;
  Tensor general = from_vector(gm, {B, 1, N, N});
  struct Case {
    std::string spec;
    bool cross, causal;
    Tensor mask;
  };
  std::vector<Case> cases = {{"performer(heads=2, features=12)", false, false, {}},
                             {"performer(heads=2, features=5, ortho=false, key_size=3, value_size=5)", false, true, {}},
                             {"performer(heads=2, features=7, eps=0)", false, true, kpad},
                             {"performer(heads=2, features=9)", false, false, kpad},
                             {"performer(heads=2, features=6, eps=0)", false, false, general},
                             {"performer(heads=2, features=6)", false, true, general},
                             {"performer(heads=2, features=8, eps=0)", true, false, cpad},
                             {"performer(heads=2, features=8, gate=hard_concrete, bias=false)", false, false, {}}};
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    CAPTURE(c.causal);
    auto a = float64_layer(c.spec);
    a->eval();
    auto& p = performer(a);
    if (p.gate) {
      NoGradGuard ng;
      copy_(p.gate->log_alpha, from_vector<double>({-0.3, 1.5}));
    }
    auto r = a->forward(x, c.cross ? ctx : Tensor(), c.mask, c.causal, true);
    OracleResult want = naive_kernelized(p, x, c.cross ? ctx : x, mask_fn(c.mask, c.causal), favor(p.projection),
                                         p.performer.eps);
    CHECK(allclose(r.output, want.output, 1e-10, 1e-12));
    CHECK(allclose(r.attention, want.attention, 1e-10, 1e-12));
    CHECK(all_finite(r.output));
  }
}

TEST_CASE("performer: the stabilising shift keeps float32 finite where exp would overflow, eps rescaled") {
  // Large q and k: exponents of several hundred overflow exp in float32 (and the eps of the
  // unshifted formula is then negligible); the shifted float32 layer must match float64.
  manual_seed(3);
  auto a32 = make_attention("performer(heads=2, features=16, eps=1e-6)", 8);
  {
    NoGradGuard ng;
    auto& p = performer(a32);
    mul_(p.q_proj->weight, 12.0);
    mul_(p.k_proj->weight, 12.0);
  }
  a32->eval();
  auto a64 = make_attention(a32->spec(), 8);
  a64->to(kFloat64);
  a64->load_state_dict(a32->state_dict());
  a64->eval();
  Generator g(22);
  Tensor x = randn({2, 6, 8}, g);
  for (bool causal : {false, true}) {
    Tensor y32 = a32->forward(x, {}, {}, causal).output, y64 = a64->forward(to(x, kFloat64), {}, {}, causal).output;
    CHECK(all_finite(y32));
    CHECK(allclose(y32, y64, 1e-3, 1e-3));
  }
  // eps matters when the unshifted denominator is tiny: shift-invariance means the float64 layer
  // with a big eps still equals the unshifted formula
  auto big = float64_layer("performer(heads=2, features=8, eps=0.5)");
  {
    NoGradGuard ng;
    auto& p = performer(big);
    mul_(p.q_proj->weight, 3.0);
  }
  big->eval();
  Tensor x64 = randn({1, 4, 8}, g, kFloat64);
  auto& p = performer(big);
  OracleResult want = naive_kernelized(p, x64, x64, mask_fn({}, true), favor(p.projection), 0.5);
  CHECK(allclose(big->forward(x64, {}, {}, true).output, want.output, 1e-10, 1e-12));
}

TEST_CASE("performer approaches exact softmax attention as the features grow") {
  // Mean |performer - mha| over outputs, with the same projections, for m = 16 .. 1024 features,
  // averaged over seeds. Positive random features have heavy tails at small dk (one long row
  // aligned with q + k can dominate a draw), so the average is geometric (the mean of log
  // errors): an outlier seed shifts it by a bounded amount. The error falls like 1/sqrt(m).
  const std::vector<int64_t> ms = {16, 64, 256, 1024};
  for (bool ortho : {true, false}) {
    CAPTURE(ortho);
    std::vector<double> log_err(ms.size(), 0.0);
    const int seeds = 10;
    for (int s = 0; s < seeds; ++s) {
      Generator g(100 + s);
      Tensor x = randn({1, 16, 8}, g, kFloat64, 0, 0.5);
      auto exact = float64_layer("mha(heads=2)", 8, 200 + s);
      exact->eval();
      Tensor want = exact->forward(x).output;
      for (size_t i = 0; i < ms.size(); ++i) {
        auto a = float64_layer(fmt::format("performer(heads=2, features={}, ortho={})", ms[i], ortho), 8, 300 + s);
        a->load_state_dict(exact->state_dict(), /*strict=*/false);  // the projections; projection stays
        a->eval();
        log_err[i] += std::log(mean_abs_diff(a->forward(x).output, want)) / seeds;
      }
    }
    std::vector<double> err;
    for (double l : log_err) err.push_back(std::exp(l));
    MESSAGE("ortho=" << ortho << ": mean error at m=16, 64, 256, 1024: " << err[0] << ", " << err[1] << ", "
                     << err[2] << ", " << err[3]);
    for (size_t i = 1; i < ms.size(); ++i) CHECK(err[i] < err[i - 1]);
    CHECK(err[3] < 0.35 * err[0]);  // 1/sqrt(64) = 0.125 in expectation
  }
}

TEST_CASE("performer projection: orthogonal blocks from a sign-corrected QR, Gaussian row norms") {
  const int64_t m = 10, dk = 4;
  Generator gen(5);
  Tensor w = nn::Performer::draw_projection(m, dk, true, gen);  // (m, dk) float64
  CHECK(w.shape() == Dims{m, dk});
  auto wv = w.to_vector<double>();
  // Replay the documented draws: 3 blocks (dk, dk), then the (m, dk) norm matrix.
  Generator replay(5);
  std::vector<std::vector<double>> blocks;
  for (int b = 0; b < 3; ++b) blocks.push_back(randn({dk, dk}, replay, kFloat64).to_vector<double>());
  auto norms = randn({m, dk}, replay, kFloat64).to_vector<double>();
  auto row_dot = [&](int64_t r, int64_t s) {
    double d = 0;
    for (int64_t i = 0; i < dk; ++i) d += wv[r * dk + i] * wv[s * dk + i];
    return d;
  };
  for (int64_t r = 0; r < m; ++r) {
    double want = 0;
    for (int64_t i = 0; i < dk; ++i) want += norms[r * dk + i] * norms[r * dk + i];
    CHECK(std::sqrt(row_dot(r, r)) == doctest::Approx(std::sqrt(want)).epsilon(1e-12));
    for (int64_t s = (r / dk) * dk; s < std::min(m, (r / dk + 1) * dk); ++s)
      if (s != r) CHECK(std::abs(row_dot(r, s)) < 1e-12 * std::sqrt(row_dot(r, r) * row_dot(s, s)));
  }
  // Sign-corrected QR: with Q the block's unit rows as columns, R = Q^T G is upper triangular
  // with a positive diagonal.
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t j = 0; j < dk; ++j) {
        const int64_t r = b * dk + i;
        const double len = std::sqrt(row_dot(r, r));
        double rij = 0;  // (unit row r) . (column j of G)
        for (int64_t l = 0; l < dk; ++l) rij += wv[r * dk + l] / len * blocks[b][l * dk + j];
        if (i > j) CHECK(std::abs(rij) < 1e-12);
        if (i == j) CHECK(rij > 0);
      }
  }
  // the last block's rows are the first m mod dk rows of its Q
  {
    const double len = std::sqrt(row_dot(8, 8));
    double r00 = 0;
    for (int64_t l = 0; l < dk; ++l) r00 += wv[8 * dk + l] / len * blocks[2][l * dk + 0];
    double col0 = 0;
    for (int64_t l = 0; l < dk; ++l) col0 += blocks[2][l * dk] * blocks[2][l * dk];
    CHECK(r00 == doctest::Approx(std::sqrt(col0)).epsilon(1e-12));  // q_0 = g_0 / |g_0|
  }
  // statistics: squared row norms average dk (chi-square with dk degrees of freedom)
  Generator big(6);
  Tensor wb = nn::Performer::draw_projection(4096, 16, true, big);
  CHECK(mean(sum(square(wb), {1})).item() == doctest::Approx(16.0).epsilon(0.05));
  // a layer's buffer: (m, dk), float32-rounded but orthogonal within blocks
  auto a = make_attention("performer(heads=2, features=6)", 8);  // dk = 4: blocks of 4 and 2
  Tensor pr = performer(a).projection;
  CHECK(pr.shape() == Dims{6, 4});
  CHECK(pr.dtype() == kFloat32);
  Tensor gram = matmul(narrow(pr, 0, 0, 4), transpose(narrow(pr, 0, 0, 4), 0, 1));  // (4, 4)
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j)
      if (i != j) CHECK(std::abs(gram.at({i, j})) < 1e-5 * std::sqrt(gram.at({i, i}) * gram.at({j, j})));
  // ortho=false: an unstructured Gaussian matrix
  Generator iid(7), iid_replay(7);
  CHECK(allclose(nn::Performer::draw_projection(5, 3, false, iid), randn({5, 3}, iid_replay, kFloat64), 0, 0));
}

TEST_CASE("performer redraw: a new projection after every T train-mode calls, none in eval") {
  auto a = float64_layer("performer(heads=2, features=8, redraw=2)");
  auto& p = performer(a);
  Generator g(23);
  Tensor x = randn({1, 3, 8}, g, kFloat64);
  Tensor p0 = clone(p.projection);
  a->eval();
  for (int i = 0; i < 5; ++i) a->forward(x);
  CHECK(allclose(p.projection, p0, 0, 0));  // eval: never counted, never redrawn
  a->train();
  a->forward(x);
  CHECK(allclose(p.projection, p0, 0, 0));  // 1 of 2
  // The 2nd call redraws after its forward pass; its graph keeps the projection it used.
  Tensor xin = clone(x).requires_grad_();
  Tensor y = a->forward(xin).output;
  Tensor p1 = clone(p.projection);
  CHECK_FALSE(allclose(p1, p0));
  Tensor gout = randn({1, 3, 8}, g, kFloat64);
  sum(y * gout).backward();
  {
    auto twin = float64_layer("performer(heads=2, features=8)");  // same seed: same weights and p0
    CHECK(allclose(performer(twin).projection, p0, 0, 0));
    Tensor xt = clone(x).requires_grad_();
    Tensor yt = twin->forward(xt).output;
    CHECK(allclose(y, yt, 1e-12, 1e-14));
    sum(yt * gout).backward();
    CHECK(allclose(xin.grad(), xt.grad(), 1e-12, 1e-14));
  }
  a->forward(x);
  CHECK(allclose(p.projection, p1, 0, 0));
  a->forward(x);
  CHECK_FALSE(allclose(p.projection, p1));
  // the redrawn projection is still orthogonal-by-blocks with dk = 4
  Tensor pr = p.projection;
  Tensor gram = matmul(narrow(pr, 0, 0, 4), transpose(narrow(pr, 0, 0, 4), 0, 1));
  CHECK(std::abs(gram.at({0, 1})) < 1e-10);
  // redraw=0 never redraws
  auto fixed = float64_layer("performer(heads=2, features=8)");
  Tensor f0 = clone(performer(fixed).projection);
  for (int i = 0; i < 3; ++i) fixed->forward(x);
  CHECK(allclose(performer(fixed).projection, f0, 0, 0));
}

TEST_CASE("performer gradcheck: ortho and not, causal, key mask with empty rows, general mask, cross, gated") {
  Generator g(24);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 3, 8}, g, kFloat64);
  Tensor kpad = from_vector<bool>({true, true, false, true, false, false, true, true}, {2, 1, 1, 4});
  Tensor cpad = from_vector<bool>({true, false, true, false, false, false}, {2, 1, 1, 3});
  Tensor general = from_vector<bool>({1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                      1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 1},
                                     {2, 1, 4, 4});
  struct Case {
    std::string spec;
    bool cross, causal;
    Tensor mask;
  };
  std::vector<Case> cases = {{"performer(heads=2, features=6, key_size=3)", false, false, {}},
                             {"performer(heads=2, features=5, ortho=false, causal=true)", false, true, {}},
                             {"performer(heads=2, features=6, eps=0)", false, true, kpad},
                             {"performer(heads=2, features=6)", false, false, kpad},
                             {"performer(heads=2, features=6, eps=0)", false, false, general},
                             {"performer(heads=2, features=4)", false, true, general},
                             {"performer(heads=2, features=6, value_size=3)", true, false, cpad},
                             {"performer(heads=2, features=6, gate=hard_concrete, bias=false)", false, true, {}}};
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    CAPTURE(c.causal);
    CAPTURE(c.mask.defined());
    auto a = float64_layer(c.spec);
    a->eval();
    auto r = gradcheck_layer(*a, x, c.cross ? ctx : Tensor(), c.mask, c.causal);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("performer: names, shapes, spec round trip, errors") {
  auto a = make_attention("performer(heads=2, features=6, redraw=3)", 8);
  auto bufs = a->named_buffers();
  REQUIRE(bufs.size() == 2);
  CHECK(bufs[0].first == "head_mask");
  CHECK(bufs[1].first == "projection");
  CHECK(bufs[1].second.shape() == Dims{6, 4});
  CHECK(a->spec() == "performer(features=6, ortho=true, redraw=3, eps=1e-06, heads=2, key_size=4, value_size=4, "
                     "bias=true, causal=false, attn_dropout=0)");
  CHECK_NOTHROW(make_attention(a->spec(), 8));
  CHECK(error_of([] { make_attention("performer(features=0)", 8); }).find("features") != std::string::npos);
  CHECK(error_of([] { make_attention("performer(redraw=-1)", 8); }).find("redraw") != std::string::npos);
  CHECK(error_of([] { make_attention("performer(eps=-1e-3)", 8); }).find("eps") != std::string::npos);
  CHECK(error_of([] { make_attention("performer(attn_dropout=0.2)", 8); }).find("attn_dropout") != std::string::npos);
  CHECK(error_of([] { make_attention("performer(ortho=maybe)", 8); }).find("true or false") != std::string::npos);
  Tensor x = zeros({1, 3, 8});
  CHECK(error_of([&] { a->forward(x, zeros({1, 2, 8}), {}, true); }).find("causal attention needs self-attention") !=
        std::string::npos);
  // a state dict without the projection does not load strictly
  TensorMap sd = a->state_dict();
  sd.erase("projection");
  CHECK(error_of([&] { a->load_state_dict(sd); }).find("projection") != std::string::npos);
}

TEST_CASE("performer golden: orthogonal features, padding mask") { run_golden_case("performer_ortho_pad"); }
TEST_CASE("performer golden: causal, iid features, gate, eps=0 with masked first keys") {
  run_golden_case("performer_causal");
}
TEST_CASE("performer golden: cross-attention, query-dependent mask (quadratic fallback)") {
  run_golden_case("performer_cross_general");
}

TEST_CASE("docs/attention.md: the performer example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("performer(heads=4, features=64, redraw=100)", 32);
  Generator gen(1);
  Tensor x = randn({2, 1000, 32}, gen);                             // (B, N, D)
  Tensor y = attn->forward(x, {}, {}, /*causal=*/true).output;      // (2, 1000, 32), O(N m)
  sum(y).backward();
  Tensor w = attn->get_buffer("projection");                        // (64, 8), shared by the heads
  CHECK(y.shape() == Dims{2, 1000, 32});
  CHECK(w.shape() == Dims{64, 8});
}

// linear (docs/attention.md, "linear"; Katharopoulos et al. 2020): the chunked causal scan
// against its naive twin causal_product_reference, the layer against plain loops of the
// documented formula (causal, key masks, general masks, cross-attention, empty rows with
// eps = 0), gradchecks, pruning, linear memory in N, errors, the golden cases and the docs example.
#include "kernelmix_testing.hpp"
#include "nn/attention/kernels/linear_scan.hpp"
#include "nn/attention/linear_attention.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::kernelmix;
using nn::make_attention;

namespace {

std::vector<double> elu_plus_one(const std::vector<double>& z) {
  std::vector<double> out(z.size());
  for (size_t i = 0; i < z.size(); ++i) out[i] = z[i] > 0 ? z[i] + 1 : std::exp(z[i]);
  return out;
}

nn::ProjectedAttention& projected(const std::shared_ptr<nn::Attention>& a) {
  return dynamic_cast<nn::ProjectedAttention&>(*a);
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("causal_product equals its masked quadratic form across chunk boundaries, both directions") {
  for (int64_t N : {1, 5, 64, 65, 150}) {
    for (bool reverse : {false, true}) {
      CAPTURE(N);
      CAPTURE(reverse);
      Generator g(N);
      Tensor a = randn({3, N, 3}, g, kFloat64), b = randn({3, N, 3}, g, kFloat64), c = randn({3, N, 4}, g, kFloat64);
      CHECK(allclose(nn::scan::causal_product(a, b, c, reverse), nn::scan::causal_product_reference(a, b, c, reverse),
                     1e-10, 1e-10));
    }
  }
  // float32 agrees with the twin (summed in double, rounded to float32) to float rounding
  Generator g(3);
  Tensor a = randn({2, 130, 4}, g), b = randn({2, 130, 4}, g), c = randn({2, 130, 5}, g);
  CHECK(allclose(nn::scan::causal_product(a, b, c), nn::scan::causal_product_reference(a, b, c), 1e-4, 1e-3));
}

TEST_CASE("causal_product gradcheck across a chunk boundary, causal and anti-causal") {
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    Tensor a = leaf64({2, 67, 2}, 1), b = leaf64({2, 67, 2}, 2), c = leaf64({2, 67, 3}, 3);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return nn::scan::causal_product(in[0], in[1], in[2], reverse); },
                       {a, b, c});
    CHECK_MESSAGE(r.ok, r.message);
  }
  // non-contiguous inputs (transposed views)
  Generator g(4);
  Tensor a = transpose(randn({2, 3, 5}, g, kFloat64), 1, 2), b = transpose(randn({2, 3, 5}, g, kFloat64), 1, 2);
  Tensor c = randn({2, 5, 2}, g, kFloat64);
  CHECK(allclose(nn::scan::causal_product(a, b, c), nn::scan::causal_product_reference(a, b, c), 1e-10, 1e-12));
}

TEST_CASE("linear equals the plain-loop formula: self, causal, cross, key masks, general masks, empty rows") {
  const int64_t B = 2, N = 5, M = 4, D = 8;
  Generator g(11);
  Tensor x = randn({B, N, D}, g, kFloat64), ctx = randn({B, M, D}, g, kFloat64);
  // (B, 1, 1, N) key mask: batch 1 masks its first two keys (its queries 0, 1 see nothing causally)
  Tensor kpad = from_vector<bool>({true, true, true, false, true, false, false, true, true, true}, {B, 1, 1, N});
  // (B, 1, 1, M) cross key mask: batch 1 masks every key
  Tensor cpad = from_vector<bool>({true, false, true, true, false, false, false, false}, {B, 1, 1, M});
  // (1, h, 1, N) per-head key mask
  Tensor hpad = from_vector<bool>({true, false, true, true, true, false, true, true, false, true}, {1, 2, 1, N});
  // (B, 1, N, N) general mask with a fully masked row (b=1, n=2)
  std::vector<bool> gm(B * N * N);
  Generator mg(5);
  auto u = rand({B * N * N}, mg, kFloat64).to_vector<double>();
  for (size_t i = 0; i < gm.size(); ++i) gm[i] = u[i] < 0.6;
  for (int64_t m = 0; m < N; ++m) gm[(1 * N + 2) * N + m] = false;
  Tensor general = from_vector(gm, {B, 1, N, N});

  struct Case {
    std::string name, spec;
    bool cross, causal;
    Tensor mask;
    Allowed allowed;
  };
  auto causal_and = [](const Tensor& mask) {
    auto mv = mask.to_vector<bool>();
    Dims s = mask.shape();
    return Allowed([=](int64_t b, int64_t i, int64_t n, int64_t m) {
      if (m > n) return false;
      int64_t bb = s[0] == 1 ? 0 : b, ii = s[1] == 1 ? 0 : i, nn_ = s[2] == 1 ? 0 : n;
      return bool(mv[((bb * s[1] + ii) * s[2] + nn_) * s[3] + m]);
    });
  };
  auto masked = [](const Tensor& mask) {
    auto mv = mask.to_vector<bool>();
    Dims s = mask.shape();
    return Allowed([=](int64_t b, int64_t i, int64_t n, int64_t m) {
      int64_t bb = s[0] == 1 ? 0 : b, ii = s[1] == 1 ? 0 : i, nn_ = s[2] == 1 ? 0 : n;
      return bool(mv[((bb * s[1] + ii) * s[2] + nn_) * s[3] + m]);
    });
  };
  auto all = Allowed([](int64_t, int64_t, int64_t, int64_t) { return true; });
  auto tri = Allowed([](int64_t, int64_t, int64_t n, int64_t m) { return m <= n; });
  std::vector<Case> cases = {
      {"self", "linear(heads=2, key_size=3, value_size=5)", false, false, {}, all},
      {"causal", "linear(heads=2, causal=true)", false, true, {}, tri},
      {"causal, key mask, eps=0", "linear(heads=2, eps=0)", false, true, kpad, causal_and(kpad)},
      {"key mask", "linear(heads=2)", false, false, kpad, masked(kpad)},
      {"per-head key mask, causal", "linear(heads=2)", false, true, hpad, causal_and(hpad)},
      {"general mask (fallback)", "linear(heads=2, eps=0)", false, false, general, masked(general)},
      {"general mask, causal", "linear(heads=2)", false, true, general, causal_and(general)},
      {"cross, all keys of batch 1 masked", "linear(heads=2, eps=0)", true, false, cpad, masked(cpad)},
      {"gated, no bias", "linear(heads=2, bias=false, gate=hard_concrete)", false, false, {}, all},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto a = float64_layer(c.spec);
    a->eval();
    auto& p = projected(a);
    {
      NoGradGuard ng;
      Generator hg(9);
      copy_(p.head_mask, rand({2}, hg, kFloat64, 0.5, 1.5));
      if (p.gate) copy_(p.gate->log_alpha, randn({2}, hg, kFloat64));
    }
    const double eps = static_cast<nn::LinearAttention&>(p).eps;
    const Tensor& keys = c.cross ? ctx : x;
    auto r = a->forward(x, c.cross ? ctx : Tensor(), c.mask, c.causal, /*need_weights=*/true);
    OracleResult want = naive_kernelized(p, x, keys, c.allowed, elu_plus_one, eps);
    CHECK(allclose(r.output, want.output, 1e-10, 1e-12));
    CHECK(allclose(r.attention, want.attention, 1e-10, 1e-12));
    CHECK(all_finite(r.output));
  }
}

TEST_CASE("linear: a query with no allowed key outputs zero, with eps = 0 and finite gradients") {
  auto a = float64_layer("linear(heads=2, eps=0)");
  auto& p = projected(a);
  Generator g(12);
  Tensor x = randn({2, 4, 8}, g, kFloat64).requires_grad_();
  // batch 1 masks keys 0 and 1: causally, its queries 0 and 1 have no allowed key
  Tensor pad = from_vector<bool>({true, true, true, true, false, false, true, true}, {2, 1, 1, 4});
  auto r = a->forward(x, {}, pad, /*causal=*/true, /*need_weights=*/true);
  for (int64_t n : {0, 1}) {
    CHECK(allclose(select(select(r.output, 0, 1), 0, n), p.out_proj->bias, 0, 1e-15));  // zero head outputs
    for (double v : select(select(r.attention, 0, 1), 1, n).to_vector<double>()) CHECK(v == 0.0);
  }
  sum(r.output * randn({2, 4, 8}, g, kFloat64)).backward();
  CHECK(all_finite(x.grad()));
  for (auto& [n, t] : a->named_parameters()) CHECK(all_finite(t.grad()));
  // non-causal: a batch element with every key masked
  Tensor none = from_vector<bool>({true, false, true, true, false, false, false, false}, {2, 1, 1, 4});
  Tensor y = a->forward(x, {}, none).output;
  CHECK(allclose(select(y, 0, 1), expand(p.out_proj->bias, {4, 8}), 0, 1e-15));
  CHECK(all_finite(y));
}

TEST_CASE("linear: the implicit attention rows sum to den / (den + eps)") {
  auto a = float64_layer("linear(heads=2, eps=0)");
  Generator g(13);
  Tensor x = randn({2, 6, 8}, g, kFloat64);
  auto r = a->forward(x, {}, {}, true, true);
  CHECK(r.attention.shape() == Dims{2, 2, 6, 6});
  CHECK(allclose(sum(r.attention, {-1}), ones({2, 2, 6}, kFloat64), 1e-12, 1e-12));
  CHECK(r.attention.at({0, 0, 1, 2}) == 0.0);  // causal
}

TEST_CASE("linear gradcheck: self, causal, key mask with empty rows, general mask, cross, gated, no bias") {
  Generator g(14);
  Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = randn({2, 3, 8}, g, kFloat64);
  Tensor kpad = from_vector<bool>({true, true, false, true, false, false, true, true}, {2, 1, 1, 4});
  Tensor cpad = from_vector<bool>({true, false, true, false, false, false}, {2, 1, 1, 3});
  Tensor general = from_vector<bool>({1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1,  // row (0, 2) empty
                                      1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 1},
                                     {2, 1, 4, 4});
  struct Case {
    std::string spec;
    bool cross, causal;
    Tensor mask;
  };
  std::vector<Case> cases = {{"linear(heads=2, key_size=3)", false, false, {}},
                             {"linear(heads=2, causal=true)", false, true, {}},
                             {"linear(heads=2, eps=0)", false, true, kpad},
                             {"linear(heads=2)", false, false, kpad},
                             {"linear(heads=2, eps=0)", false, false, general},
                             {"linear(heads=2)", false, true, general},
                             {"linear(heads=2, value_size=3)", true, false, cpad},
                             {"linear(heads=2, gate=hard_concrete)", false, true, {}},
                             {"linear(heads=4, bias=false)", false, false, {}}};
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

TEST_CASE("linear: forward + backward memory grows linearly in N, causal and not") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    manual_seed(1);
    auto a = make_attention("linear(heads=2)", 16);
    auto peak = [&](int64_t N) {
      Generator g(N);
      Tensor x = randn({1, N, 16}, g).requires_grad_();
      const int64_t before = allocator_stats().bytes_in_use;
      reset_peak_bytes();
      sum(a->forward(x, {}, {}, causal).output).backward();
      return allocator_stats().peak_bytes_in_use - before;
    };
    const int64_t p1 = peak(1024), p4 = peak(4096);
    MESSAGE("peak bytes at N=1024: " << p1 << ", N=4096: " << p4);
    CHECK(p4 < 6 * p1);  // linear: ~4x; an N x N term would give ~16x
    CHECK(p4 < 4096 * 4096 * 4);  // far below even one (N, N) float matrix
  }
}

TEST_CASE("linear: parameter names, spec round trip, option errors") {
  auto a = make_attention("linear(heads=2, key_size=3, value_size=5)", 8);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(6,8)", "q_proj.bias(6)", "k_proj.weight(6,8)",
                                          "k_proj.bias(6)", "v_proj.weight(10,8)", "v_proj.bias(10)",
                                          "out_proj.weight(8,10)", "out_proj.bias(8)"});
  CHECK(a->spec() == "linear(feature=elu, eps=1e-06, heads=2, key_size=3, value_size=5, bias=true, causal=false, "
                     "attn_dropout=0)");
  CHECK_NOTHROW(make_attention(a->spec(), 8));
  CHECK(error_of([] { make_attention("linear(feature=relu)", 8); }).find("elu") != std::string::npos);
  CHECK(error_of([] { make_attention("linear(eps=-1)", 8); }).find("eps") != std::string::npos);
  CHECK(error_of([] { make_attention("linear(attn_dropout=0.1)", 8); }).find("attn_dropout") != std::string::npos);
  CHECK(error_of([] { make_attention("linear(heads=3)", 8); }).find("heads=3 does not divide d_model=8") !=
        std::string::npos);
  Tensor x = zeros({1, 3, 8}), c = zeros({1, 2, 8});
  CHECK(error_of([&] { a->forward(x, c, {}, true); }).find("causal attention needs self-attention") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, zeros({1, 1, 3, 3})); }).find("mask must be bool") != std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, ones({1, 1, 2, 3}, kBool)); }).find("does not broadcast") !=
        std::string::npos);
}

TEST_CASE("linear golden: cross-attention with key padding, an empty batch element") {
  run_golden_case("linear_cross_keymask");
}
TEST_CASE("linear golden: causal, eps=0, masked first keys, hard_concrete gate, head_mask") {
  run_golden_case("linear_causal_gate");
}
TEST_CASE("linear golden: query-dependent mask (quadratic fallback) with an empty row") {
  run_golden_case("linear_general_mask");
}

TEST_CASE("docs/attention.md: the linear example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("linear(heads=4)", 32);
  Generator gen(1);
  Tensor x = randn({2, 1000, 32}, gen);                        // (B, N, D)
  Tensor keep = reshape(lt(arange(1000.0), 900.0), {1, 1, 1, 1000});  // key padding: the last 100
  Tensor y = attn->forward(x, {}, keep, /*causal=*/true).output;      // (2, 1000, 32), O(N)
  sum(y).backward();
  auto small = attn->forward(narrow(x, 1, 0, 6), {}, {}, true, /*need_weights=*/true);
  Tensor p = small.attention;                                  // (2, 4, 6, 6), the implicit matrix
  CHECK(y.shape() == Dims{2, 1000, 32});
  CHECK(p.shape() == Dims{2, 4, 6, 6});
  CHECK(p.at({0, 0, 0, 1}) == 0.0);
}

// longformer (docs/attention.md, "longformer"): the gathered-block path against the dense-masked
// twin (the documented rule as a plain loop) in float64 for every option, with causal, padding and
// query-dependent masks, a fully masked row and cross-attention; the identity with mha when every
// position is global; gradchecks; prune == masked; errors; linear memory; the docs example. The
// fused path (tile_attention parts, run without need_weights): its parts cover the rule exactly
// once; it equals the gathered-block twin in outputs and gradients (float64, float32); its dropout
// is one counter-based dropout over the whole probability matrix; it keeps no N x window scores
// (allocator peak).
#include "blocks_testing.hpp"
#include "nn/attention/patterns.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::blocks;

namespace {

nn::Longformer& as_longformer(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::Longformer&>(*a); }

// The documented rule: n or m global, or |n - m| <= w*d and (n - m) mod d == 0; m <= n when causal;
// then the user's mask. Global positions >= N are ignored, as rows and as keys.
Rule longformer_rule(const nn::Longformer& L, int64_t N, bool causal, const Tensor& mask) {
  std::set<int64_t> G(L.options.global.begin(), L.options.global.end());
  if (!L.options.global_list)
    for (int64_t g = 0; g < L.options.global_first; ++g) G.insert(g);
  const int64_t w = L.options.window, d = L.options.dilation;
  auto user = mask_reader(mask);
  return [=](int64_t b, int64_t i, int64_t n, int64_t m) {
    const bool global = (G.count(n) && n < N) || (G.count(m) && m < N);
    const bool window = std::abs(n - m) <= w * d && (n - m) % d == 0;
    return (global || window) && (!causal || m <= n) && user(b, i, n, m);
  };
}

struct Case {
  std::string spec;
  int64_t N, M;  // M = 0: self-attention
  std::string mask;  // "", "padding", "rows" (query-dependent, with a fully masked row)
  bool causal_arg = false;
};

Tensor make_mask(const std::string& kind, int64_t B, int64_t N, int64_t M, uint64_t seed) {
  if (kind.empty()) return {};
  Generator g(seed);
  if (kind == "heads" || kind == "2d") {  // (1, 2, N, M) per head, or (N, M)
    const Dims shape = kind == "2d" ? Dims{N, M} : Dims{1, 2, N, M};
    auto u = rand(shape, g, kFloat64).to_vector<double>();
    std::vector<bool> v(u.size());
    for (size_t i = 0; i < u.size(); ++i) v[i] = u[i] < 0.6;
    return from_vector(v, shape);
  }
  if (kind == "padding") {  // (B, 1, 1, M): batch 0 pads its last key, batch 1 its last three
    std::vector<bool> v(B * M, true);
    v[M - 1] = false;
    for (int64_t m = M - 3; m < M; ++m) v[M + m] = false;
    return from_vector(v, {B, 1, 1, M});
  }
  // (B, 1, N, M) random with key 0 open, and batch 1 row 1 closed entirely
  Tensor r = rand({B, 1, N, M}, g, kFloat64);
  std::vector<bool> v(B * N * M);
  auto u = r.to_vector<double>();
  for (int64_t i = 0; i < B * N * M; ++i) v[i] = u[i] < 0.7 || i % M == 0;
  for (int64_t m = 0; m < M; ++m) v[(N + 1) * M + m] = false;
  return from_vector(v, {B, 1, N, M});
}

void check_against_twin(const Case& c) {
  CAPTURE(c.spec);
  CAPTURE(c.N);
  CAPTURE(c.M);
  CAPTURE(c.mask);
  auto a = float64_layer(c.spec);
  randomize(*a, 11);
  auto& L = as_longformer(a);
  Generator g(3);
  const int64_t B = 2;
  Tensor x = randn({B, c.N, 8}, g, kFloat64);
  Tensor ctx = c.M ? randn({B, c.M, 8}, g, kFloat64) : Tensor();
  const int64_t M = c.M ? c.M : c.N;
  Tensor mask = make_mask(c.mask, B, c.N, M, 5);
  const bool causal = c.causal_arg || L.config.causal;
  auto r = a->forward(x, ctx, mask, c.causal_arg, true);
  Dense want = naive_dense(L, x, c.M ? ctx : x, longformer_rule(L, c.N, causal, mask), &L);
  check_close("output", r.output, want.output);
  check_close("attention", r.attention, want.attention);
  for (double v : r.output.to_vector<double>()) REQUIRE(std::isfinite(v));
}

}  // namespace

TEST_CASE("longformer matches the dense-masked twin: windows, dilations, global positions, masks") {
  const std::vector<Case> cases = {
      {"longformer(heads=2, window=1)", 7, 0, ""},
      {"longformer(heads=2, window=2, dilation=2, global=0+5)", 11, 0, "padding"},
      {"longformer(heads=2, window=2, dilation=2, global=0+5)", 11, 0, "rows"},
      {"longformer(heads=2, window=0, dilation=3, global_first=0)", 10, 0, "rows"},
      {"longformer(heads=2, window=3, dilation=2, global=4+40)", 70, 0, "rows"},     // several blocks per class
      {"longformer(heads=2, window=17, global_first=2)", 100, 0, "padding"},         // b = w = 17, S = 51 < N
      {"longformer(heads=2, window=20, global=99+3)", 50, 0, ""},                    // span = whole sequence
      {"longformer(heads=2, window=2, dilation=5, global=1)", 3, 0, ""},             // d > N
      {"longformer(heads=1, window=64)", 5, 0, "rows"},                              // the default window
      {"longformer(heads=2, window=3, dilation=2, global=7)", 40, 0, "heads"},         // a mask per head
      {"longformer(heads=2, window=2, global=1, separate_global=true)", 20, 0, "2d"},  // an (N, M) mask
  };
  for (const Case& c : cases) check_against_twin(c);
}

TEST_CASE("longformer causal (option and argument) applies to the global rows too") {
  const std::vector<Case> cases = {
      {"longformer(heads=2, window=2, global=3, causal=true)", 9, 0, "padding"},
      {"longformer(heads=2, window=3, dilation=2, global=0+30, causal=true)", 70, 0, "rows"},
      {"longformer(heads=2, window=1, dilation=2, global_first=2)", 9, 0, "rows", true},
      {"longformer(heads=2, window=2, global=4, separate_global=true, causal=true)", 9, 0, "rows"},
  };
  for (const Case& c : cases) check_against_twin(c);
}

TEST_CASE("longformer separate_global: global rows use q_global/k_global/v_global against every key") {
  const std::vector<Case> cases = {
      {"longformer(heads=2, window=1, global=0+6, separate_global=true)", 8, 0, "padding"},
      {"longformer(heads=2, window=3, dilation=2, global_first=3, separate_global=true)", 40, 0, "rows"},
      {"longformer(heads=2, key_size=3, value_size=5, window=1, global=1+4, separate_global=true, bias=false)", 6, 0,
       ""},
  };
  for (const Case& c : cases) check_against_twin(c);
  auto a = float64_layer("longformer(heads=2, separate_global=true)");
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  for (std::string want : {"q_global.weight(8,8)", "q_global.bias(8)", "k_global.weight(8,8)", "k_global.bias(8)",
                           "v_global.weight(8,8)", "v_global.bias(8)"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  CHECK(float64_layer("longformer(heads=2)")->named_parameters().size() == 8);
}

TEST_CASE("longformer cross-attention on raw indices, global positions >= N ignored") {
  const std::vector<Case> cases = {
      {"longformer(heads=2, window=1, dilation=2, global=2+7)", 6, 9, "rows"},  // 7 >= N: ignored, also as a key
      {"longformer(heads=2, window=2, global=1+5, separate_global=true)", 7, 4, "rows"},  // 5 < N: a row, not a key
      {"longformer(heads=2, window=3, dilation=3, global_first=1)", 40, 25, "padding"},
  };
  for (const Case& c : cases) check_against_twin(c);
}

TEST_CASE("longformer: a fully masked row gives a zero head output and a zero attention row, never NaN") {
  auto a = float64_layer("longformer(heads=2, window=1, global=0)");
  Generator g(4);
  Tensor x = randn({1, 6, 8}, g, kFloat64).requires_grad_();
  std::vector<bool> v(36, true);
  for (int m = 0; m < 6; ++m) v[3 * 6 + m] = false;  // row 3 (local) closed
  for (int m = 0; m < 6; ++m) v[0 * 6 + m] = false;  // row 0 (global) closed
  Tensor mask = from_vector(v, {1, 1, 6, 6});
  auto r = a->forward(x, {}, mask, false, true);
  auto& L = as_longformer(a);
  for (int64_t n : {0, 3}) {
    for (double p : select(select(select(r.attention, 0, 0), 0, 0), 0, n).to_vector<double>()) CHECK(p == 0.0);
    // zero head outputs leave out_proj.bias alone
    CHECK(allclose(select(select(r.output, 0, 0), 0, n), L.out_proj->bias, 0, 1e-15));
  }
  sum(r.output).backward();
  for (double d : x.grad().to_vector<double>()) CHECK(std::isfinite(d));
}

TEST_CASE("longformer with every position global equals mha (copied weights), causal and masked too") {
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto lf = float64_layer("longformer(heads=2, window=1, dilation=2, global_first=100)");
    auto mha = float64_layer("mha(heads=2)");
    randomize(*lf, 12);
    mha->load_state_dict(lf->state_dict());
    Generator g(6);
    Tensor x = randn({2, 9, 8}, g, kFloat64);
    Tensor mask = make_mask("rows", 2, 9, 9, 7);
    auto r1 = lf->forward(x, {}, mask, causal, true), r2 = mha->forward(x, {}, mask, causal, true);
    check_close("output", r1.output, r2.output);
    check_close("attention", r1.attention, r2.attention);
  }
}

TEST_CASE("longformer attention dropout acts in train mode only") {
  auto a = float64_layer("longformer(heads=2, window=2, global=0, attn_dropout=0.5)");
  Generator g(5);
  Tensor x = randn({2, 20, 8}, g, kFloat64);
  a->eval();
  Tensor e1 = a->forward(x).output, e2 = a->forward(x).output;
  check_close("eval", e1, e2);
  a->train();
  Tensor t1 = a->forward(x).output;
  CHECK_FALSE(allclose(t1, e1, 1e-6, 1e-6));
  for (double v : t1.to_vector<double>()) CHECK(std::isfinite(v));
}

TEST_CASE("longformer gradcheck: every option combination") {
  const std::vector<std::string> specs = {
      "longformer(heads=2, window=1, global=2)",
      "longformer(heads=2, window=1, dilation=2, global_first=1, causal=true)",
      "longformer(heads=2, window=1, global=0+4, separate_global=true)",
      "longformer(heads=2, window=1, dilation=2, global=3, separate_global=true, causal=true, bias=false)",
      "longformer(heads=2, window=2, global_first=0, gate=hard_concrete)",
  };
  for (const std::string& spec : specs) {
    CAPTURE(spec);
    auto a = float64_layer(spec);
    a->eval();
    const bool causal = spec.find("causal=true") != std::string::npos;
    Generator g(8);
    Tensor x = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 5, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    Tensor self_mask = make_mask("rows", 2, 6, 6, 9), cross_mask = make_mask("padding", 2, 6, 5, 9);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, self_mask).output; },
                          inputs);
    CHECK_MESSAGE(self.ok, self.message);
    if (!causal) {
      auto cross = gradcheck(
          [&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], cross_mask).output; }, inputs);
      CHECK_MESSAGE(cross.ok, cross.message);
    }
  }
}

TEST_CASE("longformer: a pruned layer equals the masked one (separate_global, gates)") {
  auto a = float64_layer("longformer(heads=4, key_size=3, window=1, global=0+3, separate_global=true, gate=hard_concrete)");
  randomize(*a, 13);
  auto& L = as_longformer(a);
  a->eval();
  {
    NoGradGuard ng;
    copy_(L.head_mask, from_vector<double>({1, 0, 1, 0}));
  }
  Generator g(8);
  Tensor x = randn({2, 7, 8}, g, kFloat64);
  Tensor masked = a->forward(x).output;
  auto p = a->prune_heads({2, 0});
  auto& P = as_longformer(p);
  CHECK(P.config.heads == 2);
  CHECK(P.q_global->weight.shape() == Dims{6, 8});
  CHECK(P.v_global->weight.shape() == Dims{4, 8});
  CHECK(p->spec().find("global=0+3") != std::string::npos);
  check_close("pruned", p->forward(x).output, masked);
}

TEST_CASE("longformer errors name the option and the values") {
  CHECK(error_of([] { nn::make_attention("longformer(global=0+-2)", 8); }).find("positions must be >= 0, got -2") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(global=3+1+3)", 8); }).find("position 3 is listed twice") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(global=1, global_first=2)", 8); }).find("not both") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(global=a+b)", 8); }).find("global") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(global_first=-1)", 8); }).find("global_first") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(window=-1)", 8); }).find("window") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("longformer(dilation=0)", 8); }).find("dilation") != std::string::npos);
  auto a = nn::make_attention("longformer(heads=2)", 8);
  Tensor x = zeros({1, 5, 8}), c = zeros({1, 4, 8});
  CHECK(error_of([&] { a->forward(x, c, {}, true); }).find("causal attention needs self-attention") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, ones({1, 1, 4, 5}, kBool)); }).find("does not broadcast") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(x, {}, ones({3, 1, 5, 5}, kBool)); }).find("does not broadcast") !=
        std::string::npos);
}

TEST_CASE("longformer: scores are gathered, not N x M, forward+backward memory grows linearly in N") {
  auto a = nn::make_attention("longformer(heads=2, window=4, dilation=2, global=0+100)", 16);
  auto& L = as_longformer(a);
  auto p = L.pattern(4096, 4096, false);
  CHECK(p.rows == 16);
  CHECK(p.slots == 16 + 2 * 4);  // b + 2w class indices per block
  CHECK(L.pattern(4096, 4096, true).slots == 16 + 4);
  auto peak = [&](int64_t N) {
    Generator g(1);
    Tensor x = randn({1, N, 16}, g).requires_grad_();
    empty_cache();
    reset_peak_bytes();
    const int64_t before = allocator_stats().bytes_in_use;
    sum(a->forward(x).output).backward();
    return allocator_stats().peak_bytes_in_use - before;
  };
  const double small = double(peak(2048)), large = double(peak(8192));
  CHECK(large / small < 5.0);                  // 4x N: about 4x memory (dense would be ~16x)
  CHECK(large < 8192.0 * 8192.0 * 4.0 / 4.0);  // far below one float32 N x N matrix
}

TEST_CASE("docs/attention.md: the longformer example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("longformer(heads=4, window=8, dilation=1, global=0+63, separate_global=true)", 32);
  Generator gen(1);
  Tensor x = randn({2, 64, 32}, gen);  // (B, N, D)
  Tensor pad = ones({2, 1, 1, 64}, kBool);
  auto r = attn->forward(x, {}, pad, /*causal=*/false, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 64, 32)
  Tensor p = r.attention;  // (2, 4, 64, 64), densified: small inputs only
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 64, 32});
  CHECK(p.at({0, 0, 20, 40}) == 0.0);  // outside the window, neither position global
  CHECK(p.at({0, 0, 20, 63}) > 0.0);   // 63 is global
  CHECK(p.at({0, 0, 63, 40}) > 0.0);   // global rows see every key
}

// ---- the fused path ----

namespace {

// How many of the parts allow (n, m), by plain loops over their kernel-coordinate patterns.
std::vector<int> coverage(const std::vector<nn::PatternPart>& parts, int64_t N, int64_t M) {
  std::vector<int> count(N * M, 0);
  for (const nn::PatternPart& part : parts) {
    const nn::TilePattern& p = part.pattern;
    for (size_t i = 0; i < p.lo.size(); ++i) {
      const int64_t n = part.q_rows.empty() ? int64_t(i) : part.q_rows[i];
      for (int64_t j = p.lo[i]; j < p.hi[i]; ++j) {
        if (!p.ex_lo.empty() && j >= p.ex_lo[i] && j < p.ex_hi[i]) continue;
        const int64_t m = part.k_rows.empty() ? j : part.k_rows[j];
        ++count[n * M + m];
      }
    }
  }
  return count;
}

// Output and gradients (x, context, every parameter) of one path, for upstream gradient `grad`.
std::vector<Tensor> run_path(nn::Attention& a, const Tensor& x0, const Tensor& c0, const Tensor& mask, bool causal,
                             bool need_weights, const Tensor& grad) {
  a.zero_grad();
  Tensor x = clone(x0).requires_grad_();
  Tensor c = c0.defined() ? clone(c0).requires_grad_() : Tensor();
  auto r = a.forward(x, c, mask, causal, need_weights);
  CHECK(r.attention.defined() == need_weights);
  r.output.backward(grad);
  std::vector<Tensor> out = {r.output, x.grad()};
  if (c.defined()) out.push_back(c.grad());
  for (auto& [name, p] : a.named_parameters()) out.push_back(p.grad().defined() ? p.grad() : zeros_like(p));
  return out;
}

void check_fused_equals_twin(const Case& c, DType dtype, double rtol, double atol) {
  CAPTURE(c.spec);
  CAPTURE(c.N);
  CAPTURE(c.M);
  CAPTURE(c.mask);
  auto a = float64_layer(c.spec);
  randomize(*a, 21);
  a->to(dtype);
  a->eval();
  Generator g(4);
  const int64_t B = 2, M = c.M ? c.M : c.N;
  Tensor x = randn({B, c.N, 8}, g, dtype);
  Tensor ctx = c.M ? randn({B, c.M, 8}, g, dtype) : Tensor();
  Tensor grad = randn({B, c.N, 8}, g, dtype);
  Tensor mask = make_mask(c.mask, B, c.N, M, 6);
  auto fused = run_path(*a, x, ctx, mask, c.causal_arg, false, grad);
  auto twin = run_path(*a, x, ctx, mask, c.causal_arg, true, grad);
  REQUIRE(fused.size() == twin.size());
  check_close("output", fused[0], twin[0], rtol, atol);
  for (size_t i = 1; i < fused.size(); ++i) check_close("gradient " + std::to_string(i), fused[i], twin[i], rtol, atol);
}

// Windows, dilations, global positions (none, a prefix, one inside the windows: an exclusion
// range, several in one window: gathered keys), causal, masks, separate_global, cross-attention,
// and N not a multiple of the tiles.
const std::vector<Case> kFusedCases = {
    {"longformer(heads=2, window=1, global_first=0)", 7, 0, ""},
    {"longformer(heads=2, window=2, global_first=1)", 11, 0, "padding"},
    {"longformer(heads=2, window=3, global=9)", 20, 0, "rows"},                         // exclusion range
    {"longformer(heads=2, window=4, global=5+8+30)", 37, 0, "padding"},                 // gathered keys
    {"longformer(heads=2, window=2, dilation=2, global=0+5)", 11, 0, "rows"},
    {"longformer(heads=2, window=0, dilation=3, global_first=0)", 10, 0, "heads"},
    {"longformer(heads=2, window=17, global_first=3)", 131, 0, "padding"},              // several tiles, ragged
    {"longformer(heads=2, window=5, dilation=3, global=2+40+77)", 131, 0, "2d"},
    {"longformer(heads=2, window=20, global=99+3)", 50, 0, ""},                         // window > N
    {"longformer(heads=2, window=3, global=4+6, causal=true)", 40, 0, "rows"},
    {"longformer(heads=2, window=2, dilation=2, global_first=2)", 30, 0, "padding", true},
    {"longformer(heads=2, window=2, global=3+5, separate_global=true)", 20, 0, "rows"},
    {"longformer(heads=2, window=3, dilation=2, global=0+9, separate_global=true, causal=true)", 33, 0, "padding"},
    {"longformer(heads=2, key_size=3, value_size=5, window=1, global=1+4, separate_global=true, bias=false)", 9, 0, ""},
    {"longformer(heads=2, window=2, global_first=100)", 9, 0, "rows"},                  // every position global
    {"longformer(heads=2, window=1, dilation=2, global=2+7)", 6, 9, "rows"},            // cross, 7 >= N ignored
    {"longformer(heads=2, window=2, global=1+5, separate_global=true)", 7, 4, "rows"},  // 5 < N: a row, not a key
    {"longformer(heads=2, window=3, dilation=3, global_first=1)", 40, 25, "padding"},
    {"longformer(heads=2, window=2, global=0+3, gate=hard_concrete)", 12, 0, "padding"},
};

}  // namespace

TEST_CASE("longformer fused parts cover the rule exactly once (no key counted twice)") {
  for (const Case& c : kFusedCases) {
    CAPTURE(c.spec);
    auto a = float64_layer(c.spec);
    auto& L = as_longformer(a);
    const int64_t M = c.M ? c.M : c.N;
    for (bool causal : {false, true}) {
      if (c.M && causal) continue;
      CAPTURE(causal);
      auto count = coverage(L.parts(c.N, M, causal), c.N, M);
      Rule rule = longformer_rule(L, c.N, causal, {});
      for (int64_t n = 0; n < c.N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          CAPTURE(n);
          CAPTURE(m);
          REQUIRE(count[n * M + m] == (rule(0, 0, n, m) && m < M ? 1 : 0));
        }
    }
  }
  // Which form the window takes at d = 1: a prefix of global keys cuts lo, one global key inside
  // the window is an exclusion range, two apart in one window gather the keys without them.
  auto window_of = [](const std::string& spec, int64_t N) { return as_longformer(float64_layer(spec)).parts(N, N, false)[0]; };
  auto prefix = window_of("longformer(window=4, global_first=2)", 32);
  CHECK(prefix.k_rows.empty());
  CHECK(prefix.pattern.ex_lo.empty());
  CHECK(prefix.pattern.lo[3] == 2);
  auto middle = window_of("longformer(window=4, global=10)", 32);
  CHECK(middle.k_rows.empty());
  CHECK(middle.pattern.ex_lo[8] == 10);
  CHECK(middle.pattern.ex_hi[8] == 11);
  auto gathered = window_of("longformer(window=4, global=10+12)", 32);
  CHECK(gathered.k_rows.size() == 30);
  CHECK(gathered.q_rows.empty());
  CHECK(as_longformer(float64_layer("longformer(window=4, global_first=0)")).parts(32, 32, false).size() == 1);
}

TEST_CASE("longformer fused path equals the gathered-block twin: outputs and gradients, float64") {
  for (const Case& c : kFusedCases) check_fused_equals_twin(c, kFloat64, 1e-10, 1e-12);
}

TEST_CASE("longformer fused path equals the gathered-block twin: outputs and gradients, float32") {
  const std::vector<Case> cases = {
      {"longformer(heads=2, window=17, global=0+70+71)", 300, 0, "padding"},
      {"longformer(heads=2, window=9, dilation=2, global_first=2, separate_global=true)", 257, 0, "rows"},
      {"longformer(heads=2, window=12, global=5+40, causal=true)", 200, 0, ""},
  };
  // k_proj.bias has an exactly-zero gradient (a per-query constant score shift), so both paths
  // give float32 rounding noise there: hence the absolute tolerance.
  for (const Case& c : cases) check_fused_equals_twin(c, kFloat32, 2e-4, 1e-4);
}

TEST_CASE("longformer gradcheck of the fused path: exclusion range, gathered keys, causal, cross") {
  const std::vector<std::string> specs = {
      "longformer(heads=2, window=2, global=3)",                            // an exclusion range
      "longformer(heads=2, window=2, global=2+4)",                          // gathered keys
      "longformer(heads=2, window=2, global=2+4, causal=true)",
      "longformer(heads=2, window=1, dilation=2, global=1+3, separate_global=true)",
  };
  for (const std::string& spec : specs) {
    CAPTURE(spec);
    auto a = float64_layer(spec);
    a->eval();
    const bool causal = spec.find("causal=true") != std::string::npos;
    Generator g(9);
    Tensor x = randn({2, 8, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    Tensor pad = make_mask("padding", 2, 8, 8, 3), cross_pad = make_mask("padding", 2, 8, 6, 3);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, pad).output; }, inputs);
    CHECK_MESSAGE(self.ok, self.message);
    if (!causal) {
      auto cross =
          gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], cross_pad).output; }, inputs);
      CHECK_MESSAGE(cross.ok, cross.message);
    }
  }
}

// The fused path's dropout is one dropout of the whole probability matrix: element (b, h, n, m)
// is kept iff tile_dropout_keep(seed, b, h, n, m) (the seed is the layer generator's next draw),
// whichever part holds it. Its draws differ from the gathered-block path's (Bernoulli masks on
// the gathered probabilities), so train-mode outputs of the two paths differ; eval mode equals.
TEST_CASE("longformer fused dropout equals dense attention times the counter-based keep mask") {
  for (const std::string spec : {"longformer(heads=2, window=2, global=0+6, attn_dropout=0.3)",
                                  "longformer(heads=2, window=1, dilation=2, global=3, attn_dropout=0.5, causal=true)"}) {
    CAPTURE(spec);
    auto a = float64_layer(spec);
    randomize(*a, 5);
    auto& L = as_longformer(a);
    Generator g(2);
    const int64_t B = 2, N = 13, h = 2;
    const double rate = L.config.attn_dropout;
    Tensor x = randn({B, N, 8}, g, kFloat64);
    Tensor mask = make_mask("padding", B, N, N, 1);
    a->eval();
    Tensor P = a->forward(x, {}, mask, false, true).attention;  // (B, h, N, N) no dropout
    a->train();
    Generator probe = L.gen;
    const uint64_t seed = probe.next_u64();
    Tensor y = a->forward(x, {}, mask).output;
    std::vector<double> z(B * h * N * N);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t n = 0; n < N; ++n)
          for (int64_t m = 0; m < N; ++m)
            z[((b * h + i) * N + n) * N + m] = nn::tile_dropout_keep(seed, b, i, n, m, rate) ? 1 / (1 - rate) : 0;
    Tensor o = matmul(P * from_vector(z, {B, h, N, N}), nn::split_heads(linear(*L.v_proj, x), h));  // (B, h, N, dv)
    Tensor want = linear(*L.out_proj, nn::merge_heads(o * nn::head_scale(L.gate, L.head_mask)));
    check_close("output", y, want);
  }
}

// Allocator peak of forward + backward at N = 4096, w = 128: the fused path against the
// gathered-block core (block_attention without need_weights, as the layer ran before). One
// float32 (B, h, N, 2w + 1) score tensor is ~8.4 MB here; the fused path holds none, only
// O(B h N (dk + dv)) tensors (~0.26 MB each).
TEST_CASE("longformer fused path: no N x window scores, peak well below the gathered-block core") {
  auto a = nn::make_attention("longformer(heads=2, window=128, global=0+100)", 16);
  auto& L = as_longformer(a);
  const int64_t N = 4096, h = 2;
  Generator g(1);
  Tensor x = randn({1, N, 16}, g).requires_grad_();
  auto peak = [&](const std::function<Tensor()>& step) {
    empty_cache();
    reset_peak_bytes();
    const int64_t before = allocator_stats().bytes_in_use;
    sum(step()).backward();
    return double(allocator_stats().peak_bytes_in_use - before);
  };
  const double fused = peak([&] { return a->forward(x).output; });
  const double core = peak([&] {
    Tensor q = nn::split_heads(linear(*L.q_proj, x), h), k = nn::split_heads(linear(*L.k_proj, x), h);
    Tensor v = nn::split_heads(linear(*L.v_proj, x), h);
    nn::BlockInputs in{q * (1 / std::sqrt(8.0)), k, v, {}, {}, {}};
    auto r = nn::block_attention(L.pattern(N, N, false), in, {}, false, 0, false, L.gen, false, "longformer");
    return L.out_proj->forward(nn::merge_heads(r.o));
  });
  const double scores = double(N) * (2 * 128 + 1) * h * 4;
  MESSAGE("peak bytes: fused " << fused << ", gathered-block core " << core << ", one score tensor " << scores);
  CHECK(fused < scores);
  CHECK(fused < core / 4);
}

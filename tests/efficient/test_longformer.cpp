// longformer (ATTENTION_SPEC.md section 2): the gathered-block path against the dense-masked twin
// (the spec's rule as a plain loop) in float64 for every option, with causal, padding and
// query-dependent masks, a fully masked row and cross-attention; the identity with mha when
// every position is global; gradchecks; prune == masked; errors; linear memory; the docs example.
#include "blocks_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::blocks;

namespace {

nn::Longformer& as_longformer(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::Longformer&>(*a); }

// The spec's rule: n or m global, or |n - m| <= w*d and (n - m) mod d == 0; m <= n when causal;
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
  auto a = make64(c.spec);
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
  Dense want = dense_twin(L, x, c.M ? ctx : x, longformer_rule(L, c.N, causal, mask), &L);
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
  auto a = make64("longformer(heads=2, separate_global=true)");
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  for (std::string want : {"q_global.weight(8,8)", "q_global.bias(8)", "k_global.weight(8,8)", "k_global.bias(8)",
                           "v_global.weight(8,8)", "v_global.bias(8)"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  CHECK(make64("longformer(heads=2)")->named_parameters().size() == 8);
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
  auto a = make64("longformer(heads=2, window=1, global=0)");
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
    auto lf = make64("longformer(heads=2, window=1, dilation=2, global_first=100)");
    auto mha = make64("mha(heads=2)");
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
  auto a = make64("longformer(heads=2, window=2, global=0, attn_dropout=0.5)");
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
    auto a = make64(spec);
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
  auto a = make64("longformer(heads=4, key_size=3, window=1, global=0+3, separate_global=true, gate=hard_concrete)");
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

TEST_CASE("longformer: scores are gathered, not N x M; forward+backward memory grows linearly in N") {
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

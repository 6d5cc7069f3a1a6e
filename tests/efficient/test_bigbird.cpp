// bigbird (docs/attention.md, "bigbird"): the gathered-block path against the dense-masked twin
// (the documented block rule as a plain loop over random_blocks) in float64, with padding and
// query-dependent masks, a fully masked row and cross-attention; the identity with mha when
// the blocks cover everything; the random_blocks draw; gradchecks; prune == masked; errors;
// the golden file of both longformer and bigbird; the docs example.
#include "blocks_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::blocks;

namespace {

nn::BigBird& as_bigbird(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::BigBird&>(*a); }

// The documented rule on blocks qb = n / b and kb = m / b: qb or kb among the first g blocks,
// |kb - qb| <= (W-1)/2, or kb in random_blocks[i, qb, :]; then the user's mask.
Rule bigbird_rule(const nn::BigBird& bb, const Tensor& mask) {
  const int64_t b = bb.options.block, g = bb.options.global, half = (bb.options.window - 1) / 2;
  const Tensor table = bb.random_blocks;
  auto user = mask_reader(mask);
  return [=](int64_t batch, int64_t i, int64_t n, int64_t m) {
    const int64_t qb = n / b, kb = m / b;
    bool ok = qb < g || kb < g || std::abs(kb - qb) <= half;
    for (int64_t t = 0; t < table.size(2); ++t) ok = ok || table.at({i, qb, t}) == double(kb);
    return ok && user(batch, i, n, m);
  };
}

Tensor padding_mask(int64_t B, int64_t M) {  // batch 0 pads its last key, batch 1 its last three
  std::vector<bool> v(B * M, true);
  v[M - 1] = false;
  for (int64_t m = M - 3; m < M; ++m) v[M + m] = false;
  return from_vector(v, {B, 1, 1, M});
}

Tensor rows_mask(int64_t B, int64_t N, int64_t M, uint64_t seed) {  // batch 1 row 3 closed
  Generator g(seed);
  auto u = rand({B, 1, N, M}, g, kFloat64).to_vector<double>();
  std::vector<bool> v(B * N * M);
  for (int64_t i = 0; i < B * N * M; ++i) v[i] = u[i] < 0.6 || i % M == 0;
  for (int64_t m = 0; m < M; ++m) v[(N + 3) * M + m] = false;
  return from_vector(v, {B, 1, N, M});
}

void check_against_twin(const std::string& spec, int64_t N, int64_t M, const Tensor& mask) {
  CAPTURE(spec);
  CAPTURE(N);
  CAPTURE(M);
  auto a = float64_layer(spec);
  randomize(*a, 21);
  auto& bb = as_bigbird(a);
  Generator g(3);
  Tensor x = randn({2, N, 8}, g, kFloat64);
  Tensor ctx = M != N ? randn({2, M, 8}, g, kFloat64) : Tensor();
  auto r = a->forward(x, ctx, mask, false, true);
  Dense want = naive_dense(bb, x, ctx.defined() ? ctx : x, bigbird_rule(bb, mask));
  check_close("output", r.output, want.output);
  check_close("attention", r.attention, want.attention);
}

}  // namespace

TEST_CASE("bigbird matches the dense-masked twin: window, global and random blocks, masks") {
  check_against_twin("bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)", 12, 12, {});
  check_against_twin("bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)", 12, 12,
                     padding_mask(2, 12));
  check_against_twin("bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)", 12, 12,
                     rows_mask(2, 12, 12, 4));
  check_against_twin("bigbird(heads=2, block=3, window=1, global=0, random=2, max_len=24)", 24, 24,
                     rows_mask(2, 24, 24, 5));
  check_against_twin("bigbird(heads=2, block=2, window=5, global=2, random=0, max_len=32)", 20, 20,
                     padding_mask(2, 20));
  check_against_twin("bigbird(heads=1, block=4, window=3, global=1, random=2, max_len=64)", 16, 16, {});  // N < max_len
  check_against_twin("bigbird(heads=2, block=2, window=3, global=4, random=1, max_len=16)", 6, 6, {});  // all global
  Generator g(9);  // a mask per head (1, h, N, M), and an (N, M) mask
  check_against_twin("bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)", 12, 12,
                     lt(rand({1, 2, 12, 12}, g, kFloat64), 0.6));
  check_against_twin("bigbird(heads=2, block=2, window=1, global=1, random=2, max_len=16)", 10, 10,
                     lt(rand({10, 10}, g, kFloat64), 0.6));
}

TEST_CASE("bigbird cross-attention on raw block indices (N != M, random entries >= M/b ignored)") {
  check_against_twin("bigbird(heads=2, block=2, window=1, global=1, random=2, max_len=16)", 8, 12,
                     rows_mask(2, 8, 12, 6));
  check_against_twin("bigbird(heads=2, block=2, window=3, global=1, random=2, max_len=16)", 12, 6,
                     padding_mask(2, 6));
}

TEST_CASE("bigbird counts each key once: loaded random entries that repeat window or global blocks or each other") {
  auto a = float64_layer("bigbird(heads=2, block=2, window=3, global=1, random=3, max_len=16)");
  randomize(*a, 24);
  auto& bb = as_bigbird(a);
  // rows j = 1..7 of head 0: window blocks, a global block, repeats, >= N/b = 6, negative
  std::vector<int64_t> t(2 * 8 * 3);
  const std::vector<std::vector<int64_t>> head0 = {{0, 0, 0}, {2, 2, 0}, {1, 3, 5}, {7, 6, -1},
                                                   {5, 5, 5}, {4, 0, 2}, {3, 3, 1},  {9, 2, 2}};
  for (int64_t j = 0; j < 8; ++j)
    for (int64_t k = 0; k < 3; ++k) t[j * 3 + k] = head0[j][k], t[24 + j * 3 + k] = (j + k + 2) % 8;
  {
    NoGradGuard ng;
    copy_(bb.random_blocks, from_vector(t, {2, 8, 3}));
  }
  Generator g(3);
  Tensor x = randn({2, 12, 8}, g, kFloat64);
  Tensor mask = rows_mask(2, 12, 12, 8);
  auto r = a->forward(x, {}, mask, false, true);
  Dense want = naive_dense(bb, x, x, bigbird_rule(bb, mask));
  check_close("output", r.output, want.output);
  check_close("attention", r.attention, want.attention);
  // every attention row sums to one (or zero when fully masked): nothing counted twice
  auto p = r.attention.to_vector<double>();
  for (size_t row = 0; row < p.size() / 12; ++row) {
    double s = 0;
    for (int m = 0; m < 12; ++m) s += p[row * 12 + m];
    CHECK((std::abs(s - 1) < 1e-12 || s == 0.0));
  }
}

TEST_CASE("bigbird: a fully masked row gives a zero head output and a zero attention row, never NaN") {
  auto a = float64_layer("bigbird(heads=2, block=2, window=1, global=1, random=1, max_len=8)");
  Generator g(4);
  Tensor x = randn({1, 8, 8}, g, kFloat64).requires_grad_();
  std::vector<bool> v(64, true);
  for (int m = 0; m < 8; ++m) v[1 * 8 + m] = v[5 * 8 + m] = false;  // a global row and a block row
  auto r = a->forward(x, {}, from_vector(v, {1, 1, 8, 8}), false, true);
  for (int64_t n : {1, 5}) {
    for (double p : select(select(select(r.attention, 0, 0), 0, 1), 0, n).to_vector<double>()) CHECK(p == 0.0);
    CHECK(allclose(select(select(r.output, 0, 0), 0, n), as_bigbird(a).out_proj->bias, 0, 1e-15));
  }
  sum(r.output).backward();
  for (double d : x.grad().to_vector<double>()) CHECK(std::isfinite(d));
}

TEST_CASE("bigbird whose blocks cover every block equals mha (copied weights)") {
  // 4 blocks, window 1, global 1: the 2 random blocks are exactly the 2 remaining ones.
  for (std::string spec : {"bigbird(heads=2, block=2, window=1, global=1, random=2, max_len=8)",
                           "bigbird(heads=2, block=2, window=5, global=0, random=0, max_len=6)"}) {
    CAPTURE(spec);
    auto bb = float64_layer(spec);
    randomize(*bb, 22);
    auto mha = float64_layer("mha(heads=2)");
    TensorMap w = bb->state_dict();
    w.erase("random_blocks");
    mha->load_state_dict(w);
    const int64_t N = spec.find("max_len=8") != std::string::npos ? 8 : 6;
    Generator g(6);
    Tensor x = randn({2, N, 8}, g, kFloat64);
    Tensor mask = rows_mask(2, N, N, 7);
    auto r1 = bb->forward(x, {}, mask, false, true), r2 = mha->forward(x, {}, mask, false, true);
    check_close("output", r1.output, r2.output);
    check_close("attention", r1.attention, r2.attention);
  }
}

TEST_CASE("bigbird random_blocks: shape, dtype, candidates outside window and global, distinct, seeded") {
  auto a = nn::make_attention("bigbird(heads=3, key_size=2, value_size=2, block=4, window=3, global=2, random=3, max_len=64)", 8);
  auto& bb = as_bigbird(a);
  const Tensor& t = bb.random_blocks;
  REQUIRE(t.shape() == Dims{3, 16, 3});
  CHECK(t.dtype() == kInt64);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 2; j < 16; ++j) {
      std::set<int64_t> seen;
      for (int64_t k = 0; k < 3; ++k) {
        const int64_t kb = static_cast<int64_t>(t.at({i, j, k}));
        CHECK(kb >= 2);
        CHECK(kb < 16);
        CHECK(std::abs(kb - j) > 1);
        seen.insert(kb);
      }
      CHECK(seen.size() == 3);
    }
  CHECK(a->named_buffers().size() == 2);
  // The same seed gives the same table; the table is a buffer, saved and loaded with the weights.
  manual_seed(3);
  auto b1 = nn::make_attention("bigbird(heads=2, max_len=256)", 8);
  manual_seed(3);
  auto b2 = nn::make_attention("bigbird(heads=2, max_len=256)", 8);
  CHECK(allclose(as_bigbird(b1).random_blocks, as_bigbird(b2).random_blocks, 0, 0));
  CHECK_FALSE(allclose(select(as_bigbird(b1).random_blocks, 0, 0), select(as_bigbird(b1).random_blocks, 0, 1), 0, 0));
}

TEST_CASE("bigbird gradcheck: every option combination") {
  const std::vector<std::string> specs = {
      "bigbird(heads=2, block=2, window=3, global=1, random=1, max_len=16)",
      "bigbird(heads=2, block=2, window=1, global=0, random=2, max_len=8, bias=false)",
      "bigbird(heads=2, block=2, window=3, global=2, random=0, max_len=8, gate=hard_concrete)",
  };
  for (const std::string& spec : specs) {
    CAPTURE(spec);
    auto a = float64_layer(spec);
    a->eval();
    Generator g(8);
    Tensor x = randn({2, 8, 8}, g, kFloat64).requires_grad_();
    Tensor ctx = randn({2, 6, 8}, g, kFloat64).requires_grad_();
    std::vector<Tensor> inputs = {x, ctx};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    Tensor self_mask = rows_mask(2, 8, 8, 9), cross_mask = padding_mask(2, 6);
    auto self = gradcheck([&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, self_mask).output; },
                          inputs);
    CHECK_MESSAGE(self.ok, self.message);
    auto cross = gradcheck(
        [&](const std::vector<Tensor>& in) { return a->forward(in[0], in[1], cross_mask).output; }, inputs);
    CHECK_MESSAGE(cross.ok, cross.message);
  }
}

TEST_CASE("bigbird: a pruned layer equals the masked one, random_blocks rows follow their heads") {
  auto a = float64_layer("bigbird(heads=4, key_size=3, block=2, window=1, global=1, random=2, max_len=16, gate=hard_concrete)");
  randomize(*a, 23);
  auto& bb = as_bigbird(a);
  a->eval();
  {
    NoGradGuard ng;
    copy_(bb.head_mask, from_vector<double>({0, 1, 0, 1}));
  }
  Generator g(8);
  Tensor x = randn({2, 12, 8}, g, kFloat64);
  Tensor masked = a->forward(x).output;
  auto p = a->prune_heads({3, 1});
  CHECK(as_bigbird(p).random_blocks.shape() == Dims{2, 8, 2});
  CHECK(allclose(select(as_bigbird(p).random_blocks, 0, 0), select(bb.random_blocks, 0, 3), 0, 0));
  check_close("pruned", p->forward(x).output, masked);
  // keeping every head in another order permutes random_blocks with the projections
  {
    NoGradGuard ng;
    fill_(bb.head_mask, 1.0);
  }
  Tensor full = a->forward(x).output;
  check_close("permuted", a->prune_heads({3, 2, 1, 0})->forward(x).output, full);
}

TEST_CASE("bigbird errors: N not a multiple of block, causal, even window, too few random candidates") {
  auto a = nn::make_attention("bigbird(heads=2, block=4, max_len=64)", 8);
  auto msg = error_of([&] { a->forward(zeros({1, 10, 8})); });
  CHECK(msg.find("N=10 is not a multiple of block=4") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 8, 8}), zeros({1, 6, 8})); }).find("M=6 is not a multiple") !=
        std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 68, 8})); }).find("exceeds max_len=64") != std::string::npos);
  CHECK(error_of([&] { a->forward(zeros({1, 8, 8}), {}, {}, true); }).find("bigbird: causal") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(causal=true)", 8); }).find("bigbird: option causal") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(window=2)", 8); }).find("must be odd") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(window=0)", 8); }).find("must be odd") != std::string::npos);
  auto few = error_of([] { nn::make_attention("bigbird(block=2, window=3, global=1, random=2, max_len=8)", 8); });
  CHECK(few.find("candidate blocks for random=2") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(block=16, max_len=100)", 8); }).find("multiple of block=16") !=
        std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(block=0)", 8); }).find("block") != std::string::npos);
  CHECK(error_of([] { nn::make_attention("bigbird(random=-1)", 8); }).find("random") != std::string::npos);
}

TEST_CASE("bigbird: gathered scores, not N x M: (window + random) b keys per row plus g b global keys") {
  auto a = nn::make_attention("bigbird(heads=2, block=16, window=3, global=2, random=3, max_len=4096)", 16);
  auto p = as_bigbird(a).pattern(4096, 4096);
  CHECK(p.rows == 16);
  CHECK(p.slots == 6 * 16);
  CHECK(p.global_keys.size() == 32);
  CHECK(p.global_rows.size() == 32);
  CHECK(p.key_heads == 2);
  auto peak = [&](int64_t N) {
    Generator g(1);
    Tensor x = randn({1, N, 16}, g).requires_grad_();
    empty_cache();
    reset_peak_bytes();
    const int64_t before = allocator_stats().bytes_in_use;
    sum(a->forward(x).output).backward();
    return allocator_stats().peak_bytes_in_use - before;
  };
  const double small = double(peak(1024)), large = double(peak(4096));
  CHECK(large / small < 5.0);  // 4x N: about 4x memory (dense would be ~16x)
}

TEST_CASE("blocks golden: longformer, dilated window, global list, padding mask") { run_golden_case("longformer_dilated_mask"); }
TEST_CASE("blocks golden: longformer, causal, separate_global, gate") { run_golden_case("longformer_causal_separate_gate"); }
TEST_CASE("blocks golden: longformer, cross-attention, separate_global, fully masked row") {
  run_golden_case("longformer_cross_separate");
}
TEST_CASE("blocks golden: longformer, several blocks per residue class") { run_golden_case("longformer_blocks"); }
TEST_CASE("blocks golden: bigbird, random_blocks loaded from the file, padding mask") { run_golden_case("bigbird_mask"); }
TEST_CASE("blocks golden: bigbird, cross-attention, fully masked row") { run_golden_case("bigbird_cross"); }

TEST_CASE("blocks golden: the file and the tests name the same cases") {
  check_golden_cases(golden(), kGoldenCases);
}

TEST_CASE("docs/attention.md: the bigbird example compiles and runs") {
  manual_seed(0);
  auto attn = nn::make_attention("bigbird(heads=4, block=8, window=3, global=1, random=2, max_len=512)", 32);
  Generator gen(1);
  Tensor x = randn({2, 64, 32}, gen);  // (B, N, D), N a multiple of block
  auto r = attn->forward(x, {}, {}, /*causal=*/false, /*need_weights=*/true);
  Tensor y = r.output;     // (2, 64, 32)
  Tensor p = r.attention;  // (2, 4, 64, 64), densified: small inputs only
  sum(y).backward();
  CHECK(y.shape() == Dims{2, 64, 32});
  CHECK(p.at({0, 0, 3, 60}) > 0.0);   // block 0 is global: it sees every block
  CHECK(p.at({0, 0, 60, 3}) > 0.0);   // and every block sees it
  CHECK(p.at({0, 0, 20, 22}) > 0.0);  // window: blocks 2 and 2
}

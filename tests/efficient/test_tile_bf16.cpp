// The fused attention kernel in bf16 (nn/attention/kernels/tile_gemm_bf16.hpp, tile_attention under
// autocast): the AVX512_BF16 tile products against float32 products of the bf16-rounded operands
// in every layout the kernel uses, and tile_attention under AutocastGuard(kBFloat16) against the
// float32 kernel within bf16 tolerances, forward and backward, over ragged tiles, odd key starts,
// odd dk and dv, grouped kv heads, the three score kinds and dropout, and the size rule (bf16 only
// where rows have enough keys). On a CPU without AVX512_BF16
// the tests check that the kernel stays float32 under autocast (bit for bit) and say so.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "autograd/autocast.hpp"
#include "helpers.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/kernels/tile_gemm_bf16.hpp"
#include "tensor/bfloat16.hpp"
#include "tile_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::tile_products;
using nn::TileOptions;
using nn::TilePattern;
namespace tile = attnlab::nn::tile;

namespace {

void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t e = 0; e < got.size(); ++e) CHECK(std::abs(got[e] - want[e]) <= 1e-5 * (1 + std::abs(want[e])));
}

}  // namespace

TEST_CASE("tile bf16 products equal float32 products of the bf16-rounded operands in every layout") {
  if (!tile::bf16_tile_products_available()) {
    MESSAGE("this CPU lacks AVX512_BF16: the bf16 tile products are not run (tile_attention stays float32)");
    CHECK_FALSE(nn::tile_attention_runs_bf16(kFloat32));
    return;
  }
  std::mt19937 rng(7);
  // Odd and even sizes, more columns than one 64-column block, k past one 64-word chunk.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7, 37, 13}, {13, 70, 10}, {6, 64, 130}, {1, 5, 1}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const int64_t k2 = (k + 1) / 2;
    const std::vector<float> X = random_floats(m * k, rng);   // (m, k): A
    const std::vector<float> Y = random_floats(k * n, rng);   // (k, n): B
    const std::vector<float> Yt = random_floats(n * k, rng);  // (n, k): B = Yt^T
    const std::vector<float> Xt = random_floats(k * m, rng);  // (k, m): A = Xt^T
    std::vector<uint32_t> a(m * k2), at(k2 * m), b(k2 * n), bt(k2 * n);
    tile::pack_pairs_in_rows(X.data(), k, m, k, a.data(), k2);
    tile::pack_pairs_across_rows(Xt.data(), m, k, m, at.data(), m);
    tile::pack_pairs_across_rows(Y.data(), n, k, n, b.data(), n);
    tile::pack_pairs_in_rows_t(Yt.data(), k, n, k, bt.data(), n);
    auto xa = [&](int64_t i, int64_t p) { return X[i * k + p]; };
    auto xta = [&](int64_t i, int64_t p) { return Xt[p * m + i]; };
    auto yb = [&](int64_t p, int64_t j) { return Y[p * n + j]; };
    auto ytb = [&](int64_t p, int64_t j) { return Yt[j * k + p]; };
    std::vector<float> C(m * n);
    tile::gemm_bf16(m, n, k2, 0.5f, a.data(), k2, 1, b.data(), n, false, C.data(), n);  // A B (QK^T's and PV's form)
    check_close(C, reference(m, n, k, 0.5, xa, yb, nullptr, true));
    const std::vector<float> C0 = C;
    tile::gemm_bf16(m, n, k2, 1.0f, a.data(), k2, 1, bt.data(), n, true, C.data(), n);  // += A Yt^T
    check_close(C, reference(m, n, k, 1.0, xa, ytb, &C0, true));
    tile::gemm_bf16(m, n, k2, 1.0f, at.data(), 1, m, b.data(), n, false, C.data(), n);  // Xt^T B (dV's, dK's form)
    check_close(C, reference(m, n, k, 1.0, xta, yb, nullptr, true));
  }
}

TEST_CASE("tile bf16 packs: every word equals its definition, over ragged 16-row and 32-column blocks and a row stride") {
  if (!tile::bf16_tile_products_available()) {
    MESSAGE("this CPU lacks AVX512_BF16: the bf16 packs are not run");
    return;
  }
  std::mt19937 rng(11);
  // The naive twins (tile_gemm_bf16.hpp): the word of bf16 values (lo, hi), hi = 0 past the edge.
  auto word = [](float lo, float hi) { return uint32_t(bfloat16(lo).bits) | uint32_t(bfloat16(hi).bits) << 16; };
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {15, 31}, {16, 32}, {17, 33}, {37, 70}, {48, 64}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const int64_t ld = cols + 3, c2 = (cols + 1) / 2, r2 = (rows + 1) / 2;
    const std::vector<float> X = random_floats(rows * ld, rng);
    auto x = [&](int64_t i, int64_t j) { return i < rows && j < cols ? X[i * ld + j] : 0.0f; };
    std::vector<uint32_t> in_rows(rows * c2), in_rows_t(c2 * rows), across(r2 * cols);
    tile::pack_pairs_in_rows(X.data(), ld, rows, cols, in_rows.data(), c2);
    tile::pack_pairs_in_rows_t(X.data(), ld, rows, cols, in_rows_t.data(), rows);
    tile::pack_pairs_across_rows(X.data(), ld, rows, cols, across.data(), cols);
    int64_t wrong = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t p = 0; p < c2; ++p) {
        wrong += in_rows[i * c2 + p] != word(x(i, 2 * p), x(i, 2 * p + 1));
        wrong += in_rows_t[p * rows + i] != word(x(i, 2 * p), x(i, 2 * p + 1));
      }
    for (int64_t p = 0; p < r2; ++p)
      for (int64_t j = 0; j < cols; ++j) wrong += across[p * cols + j] != word(x(2 * p, j), x(2 * p + 1, j));
    CHECK(wrong == 0);
  }
}

// Runs the bf16 path on problems of any size (the size rule's threshold at 0) while it lives.
struct AnySize {
  int64_t saved = tile::bf16_min_keys_per_row();
  AnySize() { tile::set_bf16_min_keys_per_row(0); }
  ~AnySize() { tile::set_bf16_min_keys_per_row(saved); }
};

TEST_CASE("tile_attention under autocast: bf16 products within bf16 tolerance of float32, forward and backward") {
  AnySize any_size;
  struct Case {
    int64_t B, H, G, N, M, dk, dv, tq, tk;
    bool causal, odd_starts;
    nn::TileScore score;
    double dropout;
  };
  const std::vector<Case> cases = {
      {2, 2, 2, 70, 70, 16, 16, 16, 32, true, false, nn::TileScore::Softmax, 0.0},   // ragged causal tiles
      {1, 4, 2, 45, 51, 9, 7, 8, 16, false, true, nn::TileScore::Softmax, 0.0},      // odd dk, dv, key starts; GQA
      {1, 2, 2, 40, 40, 8, 8, 8, 8, true, false, nn::TileScore::Sigmoid, 0.0},
      {1, 2, 2, 40, 40, 8, 8, 8, 8, false, true, nn::TileScore::Softpick, 0.0},
      {1, 2, 1, 33, 33, 8, 6, 10, 12, true, false, nn::TileScore::Softmax, 0.2},     // dropout
  };
  uint64_t seed = 40;
  for (const Case& c : cases) {
    CAPTURE(seed);
    Generator g(seed++);
    Tensor q = randn({c.B, c.H, c.N, c.dk}, g), k = randn({c.B, c.G, c.M, c.dk}, g);
    Tensor v = randn({c.B, c.G, c.M, c.dv}, g), go = randn({c.B, c.H, c.N, c.dv}, g);
    TilePattern p = nn::dense_tile_pattern(c.N, c.M, c.causal, Tensor());
    if (c.odd_starts)  // a band of 9 keys around each row: key tiles start at odd rows
      for (int64_t i = 0; i < c.N; ++i) p.lo[i] = std::max<int64_t>(0, i - 4), p.hi[i] = std::min(c.M, i + 5);
    TileOptions o;
    o.q_tile = c.tq, o.k_tile = c.tk, o.score = c.score, o.dropout = c.dropout, o.seed = 3;
    const Run f32 = run(q, k, v, p, o, go);
    CHECK_FALSE(nn::tile_attention_runs_bf16(kFloat32, o));
    AutocastGuard guard(kBFloat16, AutocastPolicy::Native);
    const bool bf16 = nn::tile_attention_runs_bf16(kFloat32, o);
    CHECK(bf16 == (guard.bf16() && tile::bf16_tile_products_available()));
    const Run mixed = run(q, k, v, p, o, go);
    if (!bf16) {
      MESSAGE("tile_attention stays float32 under autocast here (", guard.bf16() ? "no AVX512_BF16" : "autocast off",
              "): checked equal to float32");
      CHECK(rel_dist(mixed.out, f32.out) == 0.0);
      CHECK(rel_dist(mixed.dq, f32.dq) == 0.0);
      continue;
    }
    // bf16 operands carry 8 significant bits (relative 2^-9); sums of many products stay well below 2%.
    for (auto [name, a, b] : {std::tuple<const char*, Tensor, Tensor>{"out", mixed.out, f32.out}, {"dq", mixed.dq, f32.dq},
                              {"dk", mixed.dk, f32.dk}, {"dv", mixed.dv, f32.dv}}) {
      CAPTURE(name);
      const double d = rel_dist(a, b);
      CHECK(d < 2e-2);
      CHECK(d > 1e-6);  // the bf16 path ran: float32 would agree to rounding
      CHECK(a.dtype() == kFloat32);
    }
  }
}

TEST_CASE("tile_attention under autocast stays float32 below the size rule's keys per row") {
  Generator g(6);
  Tensor q = randn({1, 2, 24, 8}, g), k = randn({1, 2, 24, 8}, g), v = randn({1, 2, 24, 8}, g), go = randn({1, 2, 24, 8}, g);
  TilePattern p = nn::dense_tile_pattern(24, 24, false, Tensor());  // 24 keys per row
  TileOptions o;
  o.q_tile = 8, o.k_tile = 8;
  const Run f32 = run(q, k, v, p, o, go);
  AutocastGuard guard(kBFloat16, AutocastPolicy::Native);
  const int64_t saved = tile::bf16_min_keys_per_row();
  tile::set_bf16_min_keys_per_row(25);
  const Run below = run(q, k, v, p, o, go);
  tile::set_bf16_min_keys_per_row(24);
  const Run at = run(q, k, v, p, o, go);
  tile::set_bf16_min_keys_per_row(saved);
  CHECK(rel_dist(below.out, f32.out) == 0.0);
  CHECK(rel_dist(below.dq, f32.dq) == 0.0);
  if (nn::tile_attention_runs_bf16(kFloat32, o)) {
    CHECK(rel_dist(at.out, f32.out) > 1e-6);  // at the threshold: bf16
    CHECK(rel_dist(at.out, f32.out) < 2e-2);
  } else {
    MESSAGE("tile_attention stays float32 under autocast here: the size rule is not exercised");
    CHECK(rel_dist(at.out, f32.out) == 0.0);
  }
}

TEST_CASE("tile_attention under autocast stays float32 for float64 inputs and an odd q_tile") {
  AnySize any_size;
  Generator g(5);
  Tensor q = randn({1, 2, 20, 8}, g), k = randn({1, 2, 20, 8}, g), v = randn({1, 2, 20, 8}, g), go = randn({1, 2, 20, 8}, g);
  TilePattern p = nn::dense_tile_pattern(20, 20, true, Tensor());
  TileOptions odd;
  odd.q_tile = 7, odd.k_tile = 8;
  const Run f32 = run(q, k, v, p, odd, go);
  const Run f64 = run(to(q, kFloat64), to(k, kFloat64), to(v, kFloat64), p, odd, to(go, kFloat64));
  AutocastGuard guard(kBFloat16, AutocastPolicy::Native);
  CHECK_FALSE(nn::tile_attention_runs_bf16(kFloat64));
  CHECK_FALSE(nn::tile_attention_runs_bf16(kFloat32, odd));
  const Run mixed = run(q, k, v, p, odd, go);
  CHECK(rel_dist(mixed.out, f32.out) == 0.0);
  CHECK(rel_dist(mixed.dk, f32.dk) == 0.0);
  const Run mixed64 = run(to(q, kFloat64), to(k, kFloat64), to(v, kFloat64), p, odd, to(go, kFloat64));
  CHECK(rel_dist(mixed64.out, f64.out) == 0.0);
  CHECK(mixed64.out.dtype() == kFloat64);
}

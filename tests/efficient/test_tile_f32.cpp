// The fused attention kernel's AVX-512 float32 tile products (nn/attention/kernels/tile_gemm_f32.hpp):
// gemm_f32 against a float64 product in every layout the kernel uses, the transposed pack word for
// word, and tile_attention with these products against the same kernel on cblas_sgemm, forward
// and backward, over ragged tiles, odd dk and dv, grouped kv heads, the three score kinds,
// dropout, softcap, ALiBi, a mask and segments; float64 never takes them. On a CPU without
// AVX-512 the float32 tests say so and do not run.
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/kernels/tile_attention.hpp"
#include "nn/attention/kernels/tile_gemm_f32.hpp"
#include "tile_testing.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using namespace attnlab::testing::tile_products;
using nn::TileOptions;
using nn::TilePattern;
namespace tile = attnlab::nn::tile;

namespace {

// float32 sums of k products of unit normals: within a few ulp of sqrt(k) per term.
void check_close(const std::vector<float>& got, const std::vector<double>& want, int64_t k) {
  REQUIRE(got.size() == want.size());
  int64_t off = 0;
  for (size_t e = 0; e < got.size(); ++e)
    off += std::abs(got[e] - want[e]) > 1e-6 * (1 + std::sqrt(double(k))) * (1 + std::abs(want[e]));
  CHECK(off == 0);
}

// The kernel on cblas_sgemm while it lives.
struct OnBlas {
  OnBlas() { tile::set_f32_tile_products_enabled(false); }
  ~OnBlas() { tile::set_f32_tile_products_enabled(true); }
};

}  // namespace

TEST_CASE("tile f32 products equal float64 products in every layout the kernel uses") {
  if (!tile::f32_tile_products_available()) {
    MESSAGE("this CPU lacks AVX-512: the float32 tile products are not run (tile_attention uses cblas_sgemm)");
    return;
  }
  std::mt19937 rng(9);
  // Rows past one 6-row block and ragged, columns past one 64-column block and ragged, k past a
  // 64-long chunk, and k = 1.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{7, 37, 13}, {13, 70, 10}, {6, 64, 130}, {1, 5, 1}, {20, 129, 64}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const int64_t ldb = n + 3;
    const std::vector<float> X = random_floats(m * k, rng);    // (m, k): A row-major
    const std::vector<float> Xt = random_floats(k * m, rng);   // (k, m): A = Xt^T, read in place
    const std::vector<float> Y = random_floats(k * ldb, rng);  // (k, n), row stride ldb: B
    auto xa = [&](int64_t i, int64_t p) { return X[i * k + p]; };
    auto xta = [&](int64_t i, int64_t p) { return Xt[p * m + i]; };
    auto yb = [&](int64_t p, int64_t j) { return Y[p * ldb + j]; };
    std::vector<float> C(m * n, 7.0f);
    tile::gemm_f32(m, n, k, 0.5f, X.data(), k, 1, Y.data(), ldb, false, C.data(), n);  // scores' form: overwrites C
    check_close(C, reference(m, n, k, 0.5, xa, yb, nullptr, false), k);
    const std::vector<float> C0 = C;
    tile::gemm_f32(m, n, k, 1.0f, X.data(), k, 1, Y.data(), ldb, true, C.data(), n);  // P V's, dS K's: += A B
    check_close(C, reference(m, n, k, 1.0, xa, yb, &C0, false), k);
    const std::vector<float> C1 = C;
    tile::gemm_f32(m, n, k, 1.0f, Xt.data(), 1, m, Y.data(), ldb, true, C.data(), n);  // dV's, dK's: += Xt^T B
    check_close(C, reference(m, n, k, 1.0, xta, yb, &C1, false), k);
  }
  std::vector<float> C(6, 3.0f);
  tile::gemm_f32(2, 3, 0, 1.0f, nullptr, 1, 1, nullptr, 3, false, C.data(), 3);  // k = 0: C = 0
  CHECK(C == std::vector<float>(6, 0.0f));
}

TEST_CASE("tile f32 transposed panels: every element at its place, over ragged 16 x 16 blocks, tiles and a row stride") {
  if (!tile::f32_tile_products_available()) {
    MESSAGE("this CPU lacks AVX-512: the transposed panels are not run");
    return;
  }
  std::mt19937 rng(10);
  for (auto [n, d, tl] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {15, 17, 16}, {16, 16, 16}, {37, 64, 20}, {70, 9, 256}}) {
    CAPTURE(n);
    CAPTURE(d);
    CAPTURE(tl);
    const int64_t B = 2, heads = 3, sr = d + 2, sh = n * sr + 5, sb = heads * sh + 1,
                  ld = tile::transposed_ld(std::min(tl, n));
    const int64_t nt = (n + tl - 1) / tl;
    CHECK(ld >= std::min(tl, n) + 16);
    CHECK(ld % 16 == 0);
    const std::vector<float> X = random_floats(B * sb, rng);
    std::vector<float> out(B * heads * nt * d * ld);
    tile::transpose_heads(X.data(), sb, sh, sr, B, heads, n, d, tl, out.data());
    int64_t wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t p = 0; p < d; ++p)
            wrong += out[(((b * heads + h) * nt + j / tl) * d + p) * ld + j % tl] != X[b * sb + h * sh + j * sr + p];
    CHECK(wrong == 0);
  }
}

TEST_CASE("tile_attention float32: the AVX-512 products agree with cblas_sgemm, forward and backward") {
  if (!tile::f32_tile_products_available()) {
    MESSAGE("this CPU lacks AVX-512: tile_attention runs its float32 products on cblas_sgemm only");
    return;
  }
  struct Case {
    int64_t B, H, G, N, M, dk, dv, tq, tk;
    bool causal, odd_starts;
    nn::TileScore score;
    double dropout, softcap;
    bool alibi, mask, segments;
  };
  using S = nn::TileScore;
  const std::vector<Case> cases = {
      {2, 2, 2, 70, 70, 16, 16, 16, 32, true, false, S::Softmax, 0.0, 0.0, false, false, false},  // ragged causal tiles
      {1, 4, 2, 45, 51, 9, 7, 8, 16, false, true, S::Softmax, 0.0, 0.0, false, false, false},     // odd dk, dv; GQA
      {1, 2, 2, 40, 40, 8, 8, 7, 8, true, false, S::Sigmoid, 0.0, 0.0, false, false, false},      // odd q_tile
      {1, 2, 2, 40, 40, 8, 8, 8, 8, false, true, S::Softpick, 0.0, 0.0, false, false, false},
      {1, 2, 1, 33, 33, 8, 6, 10, 12, true, false, S::Softmax, 0.2, 0.0, false, false, false},    // dropout
      {1, 2, 2, 50, 50, 12, 12, 16, 16, true, false, S::Softmax, 0.0, 5.0, true, false, false},   // softcap, ALiBi
      {2, 2, 2, 48, 48, 8, 8, 16, 16, false, false, S::Softmax, 0.0, 0.0, false, true, true},     // mask, segments
      {1, 2, 2, 300, 300, 64, 64, 128, 256, true, false, S::Softmax, 0.0, 0.0, false, false, false},  // default tiles
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    CAPTURE(seed);
    Generator g(seed++);
    Tensor q = randn({c.B, c.H, c.N, c.dk}, g), k = randn({c.B, c.G, c.M, c.dk}, g);
    Tensor v = randn({c.B, c.G, c.M, c.dv}, g), go = randn({c.B, c.H, c.N, c.dv}, g);
    Tensor mask = c.mask ? gt(rand({c.B, 1, c.N, c.M}, g), 0.3) : Tensor();
    Tensor segments;
    if (c.segments) {
      std::vector<int64_t> ids(c.B * c.N);
      for (int64_t e = 0; e < c.B * c.N; ++e) ids[e] = (e % c.N) / 20;  // segments of 20 rows
      segments = from_vector(ids, Dims{c.B, c.N});
    }
    TilePattern p = nn::dense_tile_pattern(c.N, c.M, c.causal, mask, segments);
    if (c.odd_starts)  // a band of 9 keys around each row: key tiles start at odd rows
      for (int64_t i = 0; i < c.N; ++i) p.lo[i] = std::max<int64_t>(0, i - 4), p.hi[i] = std::min(c.M, i + 5);
    TileOptions o;
    o.q_tile = c.tq, o.k_tile = c.tk, o.score = c.score, o.dropout = c.dropout, o.seed = 3, o.softcap = c.softcap;
    if (c.alibi) o.alibi = {0.5, 0.25};
    const Run fast = run(q, k, v, p, o, go);
    Run blas;
    {
      OnBlas on_blas;
      blas = run(q, k, v, p, o, go);
    }
    for (auto [name, a, b] : {std::tuple<const char*, Tensor, Tensor>{"out", fast.out, blas.out}, {"dq", fast.dq, blas.dq},
                              {"dk", fast.dk, blas.dk}, {"dv", fast.dv, blas.dv}}) {
      CAPTURE(name);
      CHECK(rel_dist(a, b) < 1e-5);  // float32 sums in another order
    }
  }
}

TEST_CASE("tile_attention float64 does not use the float32 products: equal with them on and off") {
  Generator g(12);
  Tensor q = randn({1, 2, 30, 8}, g, kFloat64), k = randn({1, 2, 30, 8}, g, kFloat64);
  Tensor v = randn({1, 2, 30, 8}, g, kFloat64), go = randn({1, 2, 30, 8}, g, kFloat64);
  TilePattern p = nn::dense_tile_pattern(30, 30, true, Tensor());
  TileOptions o;
  o.q_tile = 8, o.k_tile = 16;
  const Run on = run(q, k, v, p, o, go);
  OnBlas on_blas;
  const Run off = run(q, k, v, p, o, go);
  CHECK(rel_dist(on.out, off.out) == 0.0);
  CHECK(rel_dist(on.dk, off.dk) == 0.0);
}

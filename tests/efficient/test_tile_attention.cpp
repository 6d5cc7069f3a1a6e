// The tiled attention kernel (nn/attention/kernels/tile_attention.hpp) against its naive twin:
// random patterns with exclusions, gathered positions and broadcast masks, ragged tiles, empty
// rows, lse as an output, dropout, float32, strided inputs, gradcheck, and bad patterns; and the
// options of current models (grouped kv heads, ALiBi, softcap, sinks, sigmoid, softpick), alone and
// together; and segment ids (packed sequences): against the twin and the dense segment mask, at
// gathered positions, gradcheck, the tile pairs skipped, and bad ids.
#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "helpers.hpp"
#include "nn/attention/attention.hpp"
#include "nn/attention/kernels/fast_tanh.hpp"
#include "nn/attention/kernels/tile_attention.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::TileOptions;
using nn::TilePattern;

namespace {

// A random pattern for N queries and M keys: random ranges (some empty), random exclusions,
// positions permuted (so the mask is read through q_pos/k_pos).
TilePattern random_pattern(int64_t N, int64_t M, uint64_t seed, bool exclusions, bool permute) {
  std::mt19937_64 rng(seed);
  TilePattern p;
  auto uniform = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  for (int64_t i = 0; i < N; ++i) {
    int64_t lo = uniform(0, M), hi = uniform(lo, M);
    if (uniform(0, 9) == 0) hi = lo;  // an empty row
    p.lo.push_back(lo);
    p.hi.push_back(hi);
    if (exclusions) {
      int64_t a = uniform(lo, hi), b = uniform(a, hi);
      p.ex_lo.push_back(a);
      p.ex_hi.push_back(b);
    }
  }
  if (permute) {
    p.q_pos.resize(N);
    p.k_pos.resize(M);
    std::iota(p.q_pos.begin(), p.q_pos.end(), 0);
    std::iota(p.k_pos.begin(), p.k_pos.end(), 0);
    std::shuffle(p.q_pos.begin(), p.q_pos.end(), rng);
    std::shuffle(p.k_pos.begin(), p.k_pos.end(), rng);
  }
  return p;
}

Tensor random_mask(Dims shape, uint64_t seed, double p_allow = 0.75) {
  Generator g(seed);
  return lt(rand(shape, g, kFloat64), p_allow);
}

// sum(out * go) + sum(lse * gl) over the finite lse entries (an empty row's lse is -inf).
Tensor loss_of(const nn::TileAttentionResult& r, const Tensor& go, const Tensor& gl) {
  Tensor l = sum(r.out * go);
  if (r.lse.defined()) l = l + sum(where(ne(r.lse, -INFINITY), r.lse, 0.0) * gl);
  return l;
}

struct Grads3 {
  Tensor out, lse, dq, dk, dv;
};

Grads3 run(bool reference, const Tensor& q0, const Tensor& k0, const Tensor& v0, const TilePattern& p,
           const TileOptions& o, const Tensor& go, const Tensor& gl) {
  Tensor q = clone(q0).requires_grad_(), k = clone(k0).requires_grad_(), v = clone(v0).requires_grad_();
  auto r = reference ? nn::tile_attention_reference(q, k, v, p, o) : nn::tile_attention(q, k, v, p, o);
  if (!o.need_lse) r.lse = Tensor();  // the twin always returns lse
  loss_of(r, go, gl).backward();
  return {r.out, r.lse, q.grad(), k.grad(), v.grad()};
}

void check_same(const Grads3& a, const Grads3& b, double rtol, double atol, bool with_lse) {
  CHECK(allclose(a.out, b.out, rtol, atol));
  if (with_lse) CHECK(allclose(a.lse, b.lse, rtol, atol));
  CHECK(allclose(a.dq, b.dq, rtol, atol));
  CHECK(allclose(a.dk, b.dk, rtol, atol));
  CHECK(allclose(a.dv, b.dv, rtol, atol));
}

}  // namespace

TEST_CASE("tile_attention equals its naive twin on random patterns, masks and ragged tiles (float64)") {
  struct Case {
    int64_t B, H, N, M, dk, dv, tq, tk;
    bool exclusions, permute;
    Dims mask;  // empty = no mask
  };
  const std::vector<Case> cases = {
      {2, 3, 13, 11, 4, 5, 4, 3, true, true, {2, 3, 13, 11}},  // full mask, many ragged tiles
      {1, 2, 37, 29, 3, 2, 8, 8, false, false, {}},           // no mask
      {2, 2, 20, 40, 5, 3, 7, 16, true, false, {2, 1, 1, 40}},  // key padding
      {2, 2, 17, 17, 4, 4, 64, 64, true, true, {1, 2, 17, 1}},  // one tile; a mask along N only
      {1, 1, 9, 6, 2, 3, 2, 2, false, true, {6}},                // a 1-d key mask
  };
  uint64_t seed = 10;
  for (const Case& c : cases) {
    CAPTURE(c.N);
    CAPTURE(c.M);
    Generator g(seed);
    Tensor q = randn({c.B, c.H, c.N, c.dk}, g, kFloat64), k = randn({c.B, c.H, c.M, c.dk}, g, kFloat64);
    Tensor v = randn({c.B, c.H, c.M, c.dv}, g, kFloat64);
    Tensor go = randn({c.B, c.H, c.N, c.dv}, g, kFloat64), gl = randn({c.B, c.H, c.N}, g, kFloat64);
    TilePattern p = random_pattern(c.N, c.M, seed, c.exclusions, c.permute);
    if (!c.mask.empty()) p.mask = random_mask(c.mask, seed + 1);
    for (bool need_lse : {false, true}) {
      TileOptions o;
      o.q_tile = c.tq, o.k_tile = c.tk, o.need_lse = need_lse;
      auto fast = run(false, q, k, v, p, o, go, gl);
      auto slow = run(true, q, k, v, p, o, go, gl);
      check_same(fast, slow, 1e-10, 1e-12, need_lse);
    }
    ++seed;
  }
}

TEST_CASE("tile_attention: a row with no allowed key gives zero output, lse -inf and zero gradients") {
  Generator g(1);
  const int64_t N = 6, M = 5;
  Tensor q = leaf64({1, 2, N, 3}, 2), k = leaf64({1, 2, M, 3}, 3), v = leaf64({1, 2, M, 4}, 4);
  TilePattern p;
  p.lo = {0, 0, 2, 0, 3, 0};
  p.hi = {5, 0, 5, 5, 3, 5};  // rows 1 and 4: empty ranges
  p.mask = from_vector<bool>({true, true, true, false, true, true}, {N, 1});  // row 3 masked out, broadcast along M
  TileOptions o;
  o.need_lse = true;
  o.q_tile = 2, o.k_tile = 2;
  auto r = nn::tile_attention(q, k, v, p, o);
  Tensor go = randn({1, 2, N, 4}, g, kFloat64);
  sum(r.out * go).backward();
  for (int64_t row : {1, 3, 4})
    for (int64_t h = 0; h < 2; ++h) {
      CHECK(r.lse.at({0, h, row}) == -INFINITY);
      for (int64_t d = 0; d < 4; ++d) CHECK(r.out.at({0, h, row, d}) == 0.0);
      for (int64_t d = 0; d < 3; ++d) CHECK(q.grad().at({0, h, row, d}) == 0.0);
    }
  for (double x : q.grad().to_vector<double>()) CHECK(std::isfinite(x));
  for (double x : k.grad().to_vector<double>()) CHECK(std::isfinite(x));
  // no keys at all (M = 0)
  auto e = nn::tile_attention(randn({1, 1, 3, 2}, g, kFloat64), zeros({1, 1, 0, 2}, kFloat64),
                              zeros({1, 1, 0, 3}, kFloat64), TilePattern{{0, 0, 0}, {0, 0, 0}, {}, {}, {}, {}, {}},
                              [] {
                                TileOptions o;
                                o.need_lse = true, o.q_tile = o.k_tile = 64;
                                return o;
                              }());
  CHECK(allclose(e.out, zeros({1, 1, 3, 3}, kFloat64)));
  CHECK(e.lse.at({0, 0, 2}) == -INFINITY);
}

TEST_CASE("tile_attention gradcheck: plain, with lse, with exclusions and a mask, with dropout") {
  const int64_t N = 7, M = 6;
  Tensor q = leaf64({1, 2, N, 3}, 5), k = leaf64({1, 2, M, 3}, 6), v = leaf64({1, 2, M, 2}, 7);
  TilePattern p = random_pattern(N, M, 8, true, true);
  p.mask = random_mask({1, 2, N, M}, 9, 0.8);
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    TileOptions o;
    o.q_tile = 3, o.k_tile = 2;
    o.need_lse = variant >= 1;
    if (variant == 2) o.dropout = 0.3, o.seed = 42;
    Generator g(11);
    Tensor gl = randn({1, 2, N}, g, kFloat64);
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          auto res = nn::tile_attention(in[0], in[1], in[2], p, o);
          if (!o.need_lse) return res.out;
          return cat({reshape(res.out, {-1}), reshape(where(ne(res.lse, -INFINITY), res.lse, 0.0), {-1})}, 0);
        },
        {q, k, v});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("tile_attention dropout equals the twin's dropout with the same seed, and changes with the seed") {
  Generator g(12);
  const int64_t N = 19, M = 23;
  Tensor q = randn({2, 2, N, 4}, g, kFloat64), k = randn({2, 2, M, 4}, g, kFloat64), v = randn({2, 2, M, 3}, g, kFloat64);
  Tensor go = randn({2, 2, N, 3}, g, kFloat64), gl = randn({2, 2, N}, g, kFloat64);
  TilePattern p = random_pattern(N, M, 13, true, true);
  TileOptions o;
  o.dropout = 0.25, o.seed = 99, o.q_tile = 5, o.k_tile = 4, o.need_lse = true;
  check_same(run(false, q, k, v, p, o, go, gl), run(true, q, k, v, p, o, go, gl), 1e-10, 1e-12, true);
  TileOptions o2 = o;
  o2.seed = 100;
  CHECK_FALSE(allclose(nn::tile_attention(q, k, v, p, o).out, nn::tile_attention(q, k, v, p, o2).out));
  // about 1 - rate of the draws survive
  int64_t kept = 0, total = 100000;
  for (int64_t m = 0; m < total; ++m) kept += nn::tile_dropout_keep(7, 0, 1, 3, m, 0.25);
  CHECK(std::abs(double(kept) / total - 0.75) < 0.01);
}

TEST_CASE("tile_attention float32 agrees with float64, strided and broadcast inputs need no copy by the caller") {
  Generator g(14);
  const int64_t B = 2, H = 3, N = 70, M = 90, dk = 8, dv = 6;
  // (B, N, h, d) storage viewed as (B, h, N, d), as split_heads gives it
  Tensor q = transpose(randn({B, N, H, dk}, g, kFloat64), 1, 2), k = transpose(randn({B, M, H, dk}, g, kFloat64), 1, 2);
  Tensor v = expand(randn({B, 1, M, dv}, g, kFloat64), {B, H, M, dv});  // stride 0 along heads
  Tensor go = randn({B, H, N, dv}, g, kFloat64), gl = randn({B, H, N}, g, kFloat64);
  TilePattern p = random_pattern(N, M, 15, true, false);
  p.mask = random_mask({B, 1, 1, M}, 16, 0.9);
  TileOptions o;
  o.q_tile = 16, o.k_tile = 32, o.need_lse = true;
  auto f64 = run(false, q, k, v, p, o, go, gl);
  check_same(f64, run(true, q, k, v, p, o, go, gl), 1e-10, 1e-12, true);
  auto f32 = run(false, to(q, kFloat32), to(k, kFloat32), to(v, kFloat32), p, o, to(go, kFloat32), to(gl, kFloat32));
  CHECK(f32.out.dtype() == kFloat32);
  check_same(f32, f64, 1e-3, 1e-4, true);
}

TEST_CASE("tile_attention results do not depend on the thread count") {
  Generator g(17);
  Tensor q = randn({2, 2, 200, 8}, g), k = randn({2, 2, 150, 8}, g), v = randn({2, 2, 150, 8}, g);
  Tensor go = randn({2, 2, 200, 8}, g);
  TilePattern p = random_pattern(200, 150, 18, true, true);
  TileOptions o;
  o.q_tile = 16, o.k_tile = 16;
  const int before = num_threads();
  set_num_threads(1);
  auto one = run(false, q, k, v, p, o, go, Tensor());
  set_num_threads(4);  // B h = 4 < 2 threads each: the split backward; one thread: the fused one
  auto many = run(false, q, k, v, p, o, go, Tensor());
  check_same(one, many, 0, 0, false);
  // only some inputs requiring a gradient, in both schemes
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    Tensor qq = clone(q).requires_grad_(), vv = clone(v).requires_grad_();
    sum(nn::tile_attention(qq, k, v, p, o).out * go).backward();
    sum(nn::tile_attention(q, k, vv, p, o).out * go).backward();
    CHECK(allclose(qq.grad(), one.dq, 0, 0));
    CHECK(allclose(vv.grad(), one.dv, 0, 0));
  }
  set_num_threads(before);
}

TEST_CASE("tile_attention rejects bad patterns and inputs with clear errors") {
  Tensor q = zeros({1, 1, 3, 2}, kFloat64), k = zeros({1, 1, 4, 2}, kFloat64), v = zeros({1, 1, 4, 2}, kFloat64);
  TilePattern ok{{0, 0, 0}, {4, 4, 4}, {}, {}, {}, {}, {}};
  CHECK_NOTHROW(nn::tile_attention(q, k, v, ok));
  TilePattern p = ok;
  p.hi = {4, 5, 4};
  CHECK(error_of([&] { nn::tile_attention(q, k, v, p); }).find("row 1 allows keys [0, 5), outside the 4 keys") !=
        std::string::npos);
  p = ok;
  p.lo = {0, 0};
  CHECK(error_of([&] { nn::tile_attention(q, k, v, p); }).find("pattern.lo has 2 entries, expected 3") !=
        std::string::npos);
  p = ok;
  p.mask = zeros({1, 1, 3, 4});
  CHECK(error_of([&] { nn::tile_attention(q, k, v, p); }).find("mask must be bool") != std::string::npos);
  p.mask = zeros({1, 1, 3, 3}, kBool);
  CHECK(error_of([&] { nn::tile_attention(q, k, v, p); }).find("does not cover") != std::string::npos);
  CHECK(error_of([&] { nn::tile_attention(q, zeros({1, 1, 4, 3}, kFloat64), v, ok); }).find("expected q (B, h, N, dk)") !=
        std::string::npos);
  CHECK(error_of([&] { nn::tile_attention(q, to(k, kFloat32), v, ok); }).find("share a dtype") != std::string::npos);
  TileOptions bad;
  bad.dropout = 1;
  CHECK(error_of([&] { nn::tile_attention(q, k, v, ok, bad); }).find("dropout must be in [0, 1)") != std::string::npos);
  bad = {};
  bad.q_tile = 0;
  CHECK(error_of([&] { nn::tile_attention(q, k, v, ok, bad); }).find("tile sizes must be positive") != std::string::npos);
}

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The options of current models for h = 4 query heads, by name: "gqa" (g = 2 kv heads), "mqa"
// (g = 1), "alibi", "softcap", "sinks", "sigmoid", "all" (g = 2, alibi, softcap, sinks) and
// "all_sigmoid" (g = 1, alibi, softcap, sigmoid), "softpick" (eps 0.05, so that the gradient
// through the row max is visible) and "all_softpick" (g = 2, alibi, softcap, softpick). Returns g.
int64_t set_options(const std::string& name, TileOptions& o, Generator& g, DType dt) {
  const bool all = name.rfind("all", 0) == 0;
  if (name == "alibi" || all) o.alibi = {0.5, 0.25, 0.7, 0.0625};
  if (name == "softcap" || all) o.softcap = 1.3;
  if (name == "sinks" || name == "all") o.sinks = randn({4}, g, dt);
  if (name == "sigmoid" || name == "all_sigmoid") o.score = nn::TileScore::Sigmoid, o.sigmoid_bias = -0.8;
  if (name == "softpick" || name == "all_softpick") o.score = nn::TileScore::Softpick, o.softpick_eps = 0.05;
  return name == "gqa" || name == "all" || name == "all_softpick" ? 2 : name == "mqa" || name == "all_sigmoid" ? 1 : 4;
}

const std::vector<std::string> kOptionSets = {"gqa",     "mqa",      "alibi", "softcap",     "sinks",
                                              "sigmoid", "softpick", "all",   "all_sigmoid", "all_softpick"};

struct OptionGrads {
  Tensor out, lse, dq, dk, dv, dsinks;
};

OptionGrads run_options(bool reference, const Tensor& q0, const Tensor& k0, const Tensor& v0, const TilePattern& p,
                        TileOptions o, const Tensor& go, const Tensor& gl) {
  Tensor q = clone(q0).requires_grad_(), k = clone(k0).requires_grad_(), v = clone(v0).requires_grad_();
  if (o.sinks.defined()) o.sinks = clone(o.sinks.detach()).requires_grad_();
  auto r = reference ? nn::tile_attention_reference(q, k, v, p, o) : nn::tile_attention(q, k, v, p, o);
  if (!o.need_lse) r.lse = Tensor();
  loss_of(r, go, gl).backward();
  return {r.out, r.lse, q.grad(), k.grad(), v.grad(), o.sinks.defined() ? o.sinks.grad() : Tensor()};
}

}  // namespace

TEST_CASE("tile_attention options equal the twin: grouped kv heads, ALiBi, softcap, sinks, sigmoid, softpick") {
  // B = 1 runs the split backward scheme, B = 4 the fused one (a task per (b, kv head)).
  for (int64_t B : {1, 4})
    for (const std::string& name : kOptionSets)
      for (DType dt : {kFloat64, kFloat32})
        for (bool need_lse : {false, true}) {
          CAPTURE(B);
          CAPTURE(name);
          CAPTURE(dtype_name(dt));
          CAPTURE(need_lse);
          Generator g(40);
          TileOptions o;
          o.q_tile = 4, o.k_tile = 3;
          const int64_t G = set_options(name, o, g, dt);
          if (need_lse && o.score != nn::TileScore::Softmax) continue;  // sigmoid and softpick have no lse
          o.need_lse = need_lse;
          const int64_t N = 11, M = 9;
          Tensor q = randn({B, 4, N, 3}, g, dt), k = randn({B, G, M, 3}, g, dt), v = randn({B, G, M, 2}, g, dt);
          Tensor go = randn({B, 4, N, 2}, g, dt), gl = randn({B, 4, N}, g, dt);
          TilePattern p = random_pattern(N, M, 41, true, true);
          p.mask = random_mask({B, 1, N, M}, 42);
          auto fast = run_options(false, q, k, v, p, o, go, gl);
          auto slow = run_options(true, q, k, v, p, o, go, gl);
          const double tol = dt == kFloat64 ? 1e-10 : 2e-4;
          CHECK(fast.dk.shape() == Dims{B, G, M, 3});
          CHECK(allclose(fast.out, slow.out, tol, tol));
          if (need_lse) CHECK(allclose(fast.lse, slow.lse, tol, tol));
          CHECK(allclose(fast.dq, slow.dq, tol, tol));
          CHECK(allclose(fast.dk, slow.dk, tol, tol));
          CHECK(allclose(fast.dv, slow.dv, tol, tol));
          if (o.sinks.defined()) CHECK(allclose(fast.dsinks, slow.dsinks, tol, tol));
        }
}

TEST_CASE("tile_attention options with dropout equal the twin with the same seed") {
  for (std::string name : {"all", "all_sigmoid", "all_softpick"}) {
    CAPTURE(name);
    Generator g(43);
    TileOptions o;
    o.q_tile = 3, o.k_tile = 4, o.dropout = 0.25, o.seed = 9;
    const int64_t G = set_options(name, o, g, kFloat64);
    Tensor q = randn({2, 4, 8, 3}, g, kFloat64), k = randn({2, G, 8, 3}, g, kFloat64), v = randn({2, G, 8, 2}, g, kFloat64);
    Tensor go = randn({2, 4, 8, 2}, g, kFloat64);
    TilePattern p;
    for (int64_t n = 0; n < 8; ++n) p.lo.push_back(0), p.hi.push_back(n + 1);  // causal
    auto fast = run_options(false, q, k, v, p, o, go, Tensor());
    auto slow = run_options(true, q, k, v, p, o, go, Tensor());
    CHECK(allclose(fast.out, slow.out, 1e-10, 1e-12));
    CHECK(allclose(fast.dq, slow.dq, 1e-10, 1e-12));
    CHECK(allclose(fast.dk, slow.dk, 1e-10, 1e-12));
    CHECK(allclose(fast.dv, slow.dv, 1e-10, 1e-12));
  }
}

TEST_CASE("the float tanh of soft-capping is within 2 ulp-sized steps of std::tanh over the whole float range") {
  // Every 9973rd float from 1e-30 to 20 and its negative, plus the points where the range
  // reduction changes k and the clamp at 9; error measured against tanh in double, relative to
  // the result (tanh(x) ~ x near 0, so small inputs are checked relatively too).
  std::vector<float> xs{0.0f, -0.0f, 9.0f, -9.0f, 9.5f, 50.0f, -1e30f, 0.173f, 0.1733f, 0.3466f, 0.5199f};
  for (uint32_t bits = std::bit_cast<uint32_t>(1e-30f); bits <= std::bit_cast<uint32_t>(20.0f); bits += 9973) {
    xs.push_back(std::bit_cast<float>(bits));
    xs.push_back(-std::bit_cast<float>(bits));
  }
  std::vector<float> t(xs.size());
  nn::fastmath::tanh_block(xs.data(), t.data(), int64_t(xs.size()));
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = std::tanh(double(xs[i]));
    const double rel = exact == 0 ? std::fabs(double(t[i])) : std::fabs(double(t[i]) - exact) / std::fabs(exact);
    if (rel > worst) worst = rel, worst_x = xs[i];
    REQUIRE(std::signbit(t[i]) == std::signbit(xs[i]));
  }
  INFO("worst at x = " << worst_x);
  CHECK(worst < 2.5e-7);  // float epsilon is 1.19e-7
  float in[3] = {0.5f, -2.0f, 1e-3f};
  nn::fastmath::tanh_block(in, in, 3);  // in place
  CHECK(in[1] == doctest::Approx(std::tanh(-2.0)).epsilon(3e-7));
}

TEST_CASE("tile_attention options gradcheck: each option and all together, causal with a mask and an empty row") {
  const int64_t N = 6, M = 6;
  TilePattern p;
  for (int64_t n = 0; n < N; ++n) p.lo.push_back(0), p.hi.push_back(n + 1);  // causal
  p.mask = random_mask({1, 1, N, M}, 44, 0.8);
  {
    std::vector<bool> m = p.mask.to_vector<bool>();
    for (int64_t j = 0; j < M; ++j) m[3 * M + j] = false;  // query row 3 allows nothing
    p.mask = from_vector(m, {1, 1, N, M});
  }
  for (const std::string& name : kOptionSets) {
    CAPTURE(name);
    Generator g(45);
    TileOptions o;
    o.q_tile = 4, o.k_tile = 2;
    const int64_t G = set_options(name, o, g, kFloat64);
    o.need_lse = o.score == nn::TileScore::Softmax;
    std::vector<Tensor> inputs = {leaf64({1, 4, N, 3}, 46), leaf64({1, G, M, 3}, 47), leaf64({1, G, M, 2}, 48)};
    if (o.sinks.defined()) inputs.push_back(o.sinks.requires_grad_());
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          TileOptions oi = o;
          if (oi.sinks.defined()) oi.sinks = in[3];
          auto res = nn::tile_attention(in[0], in[1], in[2], p, oi);
          if (!oi.need_lse) return res.out;
          return cat({reshape(res.out, {-1}), reshape(where(ne(res.lse, -INFINITY), res.lse, 0.0), {-1})}, 0);
        },
        inputs);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("tile_attention options: an empty row gives zero output with sinks, sigmoid, softpick, bad options are errors") {
  Generator g(49);
  TilePattern p{{0, 0, 0}, {2, 0, 3}, {}, {}, {}, {}, {}};  // row 1 allows nothing
  for (std::string name : {"sinks", "sigmoid", "softpick", "all"}) {
    CAPTURE(name);
    TileOptions o;
    const int64_t G = set_options(name, o, g, kFloat64);
    auto r = nn::tile_attention(randn({1, 4, 3, 2}, g, kFloat64), randn({1, G, 3, 2}, g, kFloat64),
                                randn({1, G, 3, 2}, g, kFloat64), p, o);
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 2; ++d) CHECK(r.out.at({0, h, 1, d}) == 0.0);
  }
  Tensor q = randn({1, 4, 3, 2}, g, kFloat64), k = randn({1, 3, 3, 2}, g, kFloat64), k2 = randn({1, 2, 3, 2}, g, kFloat64);
  CHECK(contains(error_of([&] { nn::tile_attention(q, k, k, p); }), "g dividing h"));
  TileOptions o;
  o.alibi = {0.5};
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "alibi has 1 slopes, expected one per head (4)"));
  o = TileOptions{};
  o.softcap = -1;
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "softcap must be a finite c >= 0"));
  o = TileOptions{};
  o.sinks = zeros({4}, kFloat64), o.score = nn::TileScore::Sigmoid;
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "sinks need score softmax"));
  o = TileOptions{};
  o.sinks = zeros({3}, kFloat64);
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "sinks must be (h) = (4)"));
  o = TileOptions{};
  o.score = nn::TileScore::Sigmoid, o.need_lse = true;
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "sigmoid has no lse"));
  o.score = nn::TileScore::Softpick;
  CHECK(contains(error_of([&] { nn::tile_attention(q, k2, k2, p, o); }), "softpick has no lse"));
}

TEST_CASE("tile_attention with grouped kv heads and every option does not depend on the thread count") {
  // One thread: the fused backward (a task per (b, kv head)); 4 threads with B g = 4: the split
  // one (dK, dV tasks per (b, kv head, key tile) looping over the group). Bitwise equal.
  for (std::string name : {"all", "all_sigmoid", "all_softpick"}) {
    CAPTURE(name);
    Generator g(53);
    TileOptions o;
    o.q_tile = 16, o.k_tile = 16;
    const int64_t G = set_options(name, o, g, kFloat32);
    Tensor q = randn({2, 4, 120, 8}, g), k = randn({2, G, 90, 8}, g), v = randn({2, G, 90, 8}, g);
    Tensor go = randn({2, 4, 120, 8}, g);
    TilePattern p = random_pattern(120, 90, 54, true, true);
    const int before = num_threads();
    set_num_threads(1);
    auto one = run_options(false, q, k, v, p, o, go, Tensor());
    set_num_threads(4);
    auto many = run_options(false, q, k, v, p, o, go, Tensor());
    set_num_threads(before);
    CHECK(allclose(one.out, many.out, 0, 0));
    CHECK(allclose(one.dq, many.dq, 0, 0));
    CHECK(allclose(one.dk, many.dk, 0, 0));
    CHECK(allclose(one.dv, many.dv, 0, 0));
    if (o.sinks.defined()) CHECK(allclose(one.dsinks, many.dsinks, 0, 0));
  }
}

// ---- packed sequences: segment ids in the pattern ----

TEST_CASE("tile_attention with segment ids equals the twin and the kernel given the dense segment mask") {
  const int64_t B = 2, H = 4, N = 37, dk = 5, dv = 3;
  const Tensor ids = segments_of({{9, 1, 20, 7}, {30, 7}});  // (B, N)
  for (DType dt : {kFloat64, kFloat32}) {
    const double tol = dt == kFloat64 ? 1e-10 : 2e-4;
    for (const std::string name : {"none", "all", "all_sigmoid", "all_softpick"})
      for (bool causal : {false, true})
        for (bool user_mask : {false, true}) {
          CAPTURE(dtype_name(dt));
          CAPTURE(name);
          CAPTURE(causal);
          CAPTURE(user_mask);
          Generator g(40);
          TileOptions o;
          o.q_tile = 8, o.k_tile = 4;
          const int64_t G = name == "none" ? H : set_options(name, o, g, dt);
          o.need_lse = o.score == nn::TileScore::Softmax;
          Tensor q = randn({B, H, N, dk}, g, dt), k = randn({B, G, N, dk}, g, dt), v = randn({B, G, N, dv}, g, dt);
          Tensor go = randn({B, H, N, dv}, g, dt), gl = randn({B, H, N}, g, dt);
          const Tensor mask = user_mask ? random_mask({B, 1, N, N}, 41) : Tensor();
          const TilePattern p = nn::dense_tile_pattern(N, N, causal, mask, ids);
          const TilePattern dense = nn::dense_tile_pattern(N, N, causal, nn::segment_mask(ids, mask));
          auto fast = run_options(false, q, k, v, p, o, go, gl);
          auto slow = run_options(true, q, k, v, p, o, go, gl);
          auto masked = run_options(false, q, k, v, dense, o, go, gl);
          for (const OptionGrads* other : {&slow, &masked}) {
            CHECK(allclose(fast.out, other->out, tol, tol));
            if (o.need_lse) CHECK(allclose(fast.lse, other->lse, tol, tol));
            CHECK(allclose(fast.dq, other->dq, tol, tol));
            CHECK(allclose(fast.dk, other->dk, tol, tol));
            CHECK(allclose(fast.dv, other->dv, tol, tol));
            if (o.sinks.defined()) CHECK(allclose(fast.dsinks, other->dsinks, tol, tol));
          }
        }
  }
}

TEST_CASE("tile_attention segment ids are read at the raw positions q_pos and k_pos") {
  const int64_t N = 23, M = 19;
  Generator g(42);
  TilePattern p = random_pattern(N, M, 43, true, true);  // positions permuted
  p.q_segments = segments_of({{5, 10, 8}, {23}});
  p.k_segments = segments_of({{4, 4, 11}, {19}});
  p.mask = random_mask({2, 1, N, M}, 44);
  TileOptions o;
  o.q_tile = 4, o.k_tile = 3, o.need_lse = true;
  Tensor q = randn({2, 2, N, 4}, g, kFloat64), k = randn({2, 2, M, 4}, g, kFloat64), v = randn({2, 2, M, 3}, g, kFloat64);
  Tensor go = randn({2, 2, N, 3}, g, kFloat64), gl = randn({2, 2, N}, g, kFloat64);
  check_same(run(false, q, k, v, p, o, go, gl), run(true, q, k, v, p, o, go, gl), 1e-10, 1e-12, true);
  // the dense pattern: entry (i, j) needs equal ids at (q_pos[i], k_pos[j])
  Tensor allowed = nn::tile_pattern_dense(p, N, M, 2, 2);  // (2, 1, N, M)
  const Tensor qs = p.q_segments, ks = p.k_segments;
  int64_t crossing = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < M; ++j)
        if (qs.at({b, p.q_pos[i]}) != ks.at({b, p.k_pos[j]})) {
          ++crossing;
          CHECK(allowed.at({b, 0, i, j}) == 0.0);
        }
  CHECK(crossing > 0);
}

TEST_CASE("tile_attention gradcheck with segment ids: causal, a user mask, sinks") {
  const int64_t N = 9;
  Tensor q = leaf64({2, 2, N, 3}, 45), k = leaf64({2, 2, N, 3}, 46), v = leaf64({2, 2, N, 2}, 47);
  Generator g(48);
  TileOptions o;
  o.q_tile = 2, o.k_tile = 3;
  o.sinks = clone(randn({2}, g, kFloat64)).requires_grad_();
  const TilePattern p = nn::dense_tile_pattern(N, N, true, random_mask({2, 1, N, N}, 49, 0.8), segments_of({{4, 5}, {2, 3, 4}}));
  auto r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        TileOptions oi = o;
        oi.sinks = in[3];
        return nn::tile_attention(in[0], in[1], in[2], p, oi).out;
      },
      {q, k, v, o.sinks});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("tile_attention leaves out the tile pairs whose segment ids do not meet") {
  const int64_t B = 2, H = 3, N = 64;
  Generator g(50);
  Tensor q = randn({B, H, N, 4}, g, kFloat64), k = randn({B, H, N, 4}, g, kFloat64), v = randn({B, H, N, 4}, g, kFloat64);
  TileOptions o;
  o.q_tile = o.k_tile = 16;
  auto blocks = [&](const TilePattern& p) {
    const int64_t before = nn::tile_attention_forward_blocks();
    nn::tile_attention(q, k, v, p, o);
    return nn::tile_attention_forward_blocks() - before;
  };
  // four documents of 16 tokens, each exactly one tile: only the 4 diagonal pairs of 16 are computed
  const Tensor four = segments_of({{16, 16, 16, 16}, {16, 16, 16, 16}});
  CHECK(blocks(nn::dense_tile_pattern(N, N, false, {})) == B * H * 16);
  CHECK(blocks(nn::dense_tile_pattern(N, N, false, {}, four)) == B * H * 4);
  CHECK(blocks(nn::dense_tile_pattern(N, N, true, {}, four)) == B * H * 4);
  // documents across tile bounds: row 0 has 8 + 32 + 24 tokens, so its query tiles hold ids {0, 1}, {1},
  // {1, 2}, {2} and meet 3, 3, 4, 2 key tiles; row 1 is one document (all 16 pairs)
  const Tensor mixed = segments_of({{8, 32, 24}, {64}});
  CHECK(blocks(nn::dense_tile_pattern(N, N, false, {}, mixed)) == H * (3 + 3 + 4 + 2) + H * 16);
  // and the dense segment mask computes every pair, for the same result
  CHECK(allclose(nn::tile_attention(q, k, v, nn::dense_tile_pattern(N, N, false, {}, mixed), o).out,
                 nn::tile_attention(q, k, v, nn::dense_tile_pattern(N, N, false, nn::segment_mask(mixed)), o).out,
                 1e-12, 1e-12));
}

TEST_CASE("tile_attention segment id errors") {
  Generator g(51);
  Tensor q = randn({2, 1, 5, 2}, g, kFloat64), k = randn({2, 1, 5, 2}, g, kFloat64);
  TilePattern p = nn::dense_tile_pattern(5, 5, false, {});
  p.q_segments = zeros({2, 5}, kInt64);
  CHECK(contains(error_of([&] { nn::tile_attention(q, k, k, p); }), "given together"));
  p.k_segments = zeros({2, 5}, kFloat32);
  CHECK(contains(error_of([&] { nn::tile_attention(q, k, k, p); }), "pattern.k_segments must be int64, got float32"));
  p.k_segments = zeros({1, 5}, kInt64);
  CHECK(contains(error_of([&] { nn::tile_attention(q, k, k, p); }), "pattern.k_segments must be (B=2, 5) segment ids, got (1,5)"));
  p.k_segments = zeros({2, 4}, kInt64);
  CHECK_THROWS_AS(nn::tile_attention(q, k, k, p), ShapeError);
}

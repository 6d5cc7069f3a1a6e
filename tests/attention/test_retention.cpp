// retention (docs/attention.md, "retention"): golden files from PyTorch, the three forms
// (parallel, chunked, recurrent) against a plain-loop twin and each other, key masks in every
// form, gradients of the parallel and chunked forms, decoding, pruning and the errors.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "autograd/grad_helpers.hpp"
#include "autograd/trace.hpp"
#include "nn/attention/kernels/decay_scan.hpp"
#include "golden.hpp"
#include "nn/attention/registry.hpp"
#include "nn/attention/retention.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;
namespace ret = nn::retention;

namespace {

// Keep in sync with the retention_* CASES in diff_retention_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {"retention_default_decay", "retention_decay_mask_gate",
                                         "retention_per_head_no_bias"};

const GoldenFile& golden() { return reference_file("diff_retention_golden.safetensors"); }

std::shared_ptr<nn::Attention> ret64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(7);
  auto a = make_attention(spec, d_model);
  a->to(kFloat64);
  a->eval();
  return a;
}

nn::Retention& as_ret(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::Retention&>(*a); }

// O[b, i, n] = sum_{m <= n, key m allowed} gamma_i^(n - m) (q[n] . k[m]) v[m], by plain loops.
// allowed: (B * N) flags, one per key.
Tensor naive_retention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas,
                       const std::vector<bool>& allowed) {
  const int64_t B = q.size(0), h = q.size(1), N = q.size(2), dk = q.size(3), dv = v.size(3);
  auto Q = contiguous(q).to_vector<double>(), K = contiguous(k).to_vector<double>(),
       V = contiguous(v).to_vector<double>();
  std::vector<double> o(B * h * N * dv, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m <= n; ++m) {
          if (!allowed[b * N + m]) continue;
          const int64_t r = (b * h + i) * N;
          double s = 0;
          for (int64_t d = 0; d < dk; ++d) s += Q[(r + n) * dk + d] * K[(r + m) * dk + d];
          s *= std::pow(gammas[i], double(n - m));
          for (int64_t e = 0; e < dv; ++e) o[(r + n) * dv + e] += s * V[(r + m) * dv + e];
        }
  return from_vector(o, {B, h, N, dv});
}

// Key mask flags: batch 0 drops key 2, batch 1 keys 0 and 5.
std::vector<bool> key_flags(int64_t n) {
  std::vector<bool> f(2 * n, true);
  f[2] = false;
  f[n + 0] = false;
  if (n > 5) f[n + 5] = false;
  return f;
}
Tensor key_mask_tensor(int64_t n) { return from_vector(key_flags(n), {2, 1, 1, n}); }
// k with the masked keys' rows zeroed, as the layer does.
Tensor zero_masked(const Tensor& k, int64_t n) { return where(transpose(key_mask_tensor(n), -2, -1), k, 0.0); }

}  // namespace

TEST_CASE("retention golden: default decay gamma_i = 1 - 2^(-5-i), chunk=2 < N") {
  run_golden_case(golden(), "retention_default_decay", {.also_without_weights = true});
}
TEST_CASE("retention golden: decay=0.7, key mask with an empty row, gate, key_size != value_size, chunk=3") {
  run_golden_case(golden(), "retention_decay_mask_gate", {.also_without_weights = true});
}
TEST_CASE("retention golden: one decay per head, bias=false (no g_proj.bias), chunk=4") {
  run_golden_case(golden(), "retention_per_head_no_bias", {.also_without_weights = true});
}

TEST_CASE("retention forms: parallel, chunked and recurrent equal the plain-loop sum, key mask included") {
  Generator g(1);
  const std::vector<double> gammas = {0.5, 0.9, 0.97};
  for (int64_t N : {7, 1}) {
    Tensor q = randn({2, 3, N, 3}, g, kFloat64), v = randn({2, 3, N, 4}, g, kFloat64);
    Tensor k = zero_masked(randn({2, 3, N, 3}, g, kFloat64), N);
    Tensor want = naive_retention(q, k, v, gammas, key_flags(N));
    Tensor scores;
    CHECK(allclose(ret::parallel(q, k, v, gammas, &scores), want, 1e-12, 1e-12));
    CHECK(scores.shape() == Dims{2, 3, N, N});
    // chunk not dividing N, chunk = 1, chunk = N and chunk > N
    for (int64_t chunk : {int64_t(3), int64_t(2), int64_t(1), N, N + 5}) {
      CAPTURE(N);
      CAPTURE(chunk);
      CHECK(allclose(ret::chunked(q, k, v, gammas, chunk), want, 1e-12, 1e-12));
    }
    Tensor state = zeros({2, 3, 3, 4}, kFloat64);
    Tensor first = ret::recurrent(narrow(q, 2, 0, 1), narrow(k, 2, 0, 1), narrow(v, 2, 0, 1), gammas, state);
    if (N > 1) {
      Tensor rest =
          ret::recurrent(narrow(q, 2, 1, N - 1), narrow(k, 2, 1, N - 1), narrow(v, 2, 1, N - 1), gammas, state);
      first = cat({first, rest}, 2);
    }
    CHECK(allclose(first, want, 1e-12, 1e-12));
  }
  // The masked keys matter: without the mask the result differs.
  Tensor q = randn({2, 3, 7, 3}, g, kFloat64), k = randn({2, 3, 7, 3}, g, kFloat64),
         v = randn({2, 3, 7, 4}, g, kFloat64);
  CHECK_FALSE(allclose(ret::chunked(q, zero_masked(k, 7), v, gammas, 3), ret::chunked(q, k, v, gammas, 3), 1e-6, 1e-6));
}

TEST_CASE("retention layer: chunked (forward) equals parallel (need_weights) for every chunk size, with a key mask") {
  Generator g(2);
  Tensor x = randn({2, 7, 8}, g, kFloat64);
  Tensor mask = key_mask_tensor(7);
  Tensor want = ret64("retention(heads=2, chunk=64)")->forward(x, {}, mask, false, true).output;
  for (int64_t chunk : {1, 2, 3, 7, 64}) {
    CAPTURE(chunk);
    auto a = ret64("retention(heads=2, chunk=" + std::to_string(chunk) + ")");
    auto fast = a->forward(x, {}, mask);
    CHECK_FALSE(fast.attention.defined());
    CHECK(allclose(fast.output, want, 1e-11, 1e-12));
  }
  // need_weights returns the decayed scores: zero above the diagonal and in masked key columns,
  // gamma^(n-m) q.k/sqrt(dk) elsewhere.
  auto a = ret64("retention(heads=2, decay=0.8)");
  auto& r = as_ret(a);
  Tensor att = a->forward(x, {}, mask, false, true).attention;  // (2, 2, 7, 7)
  Tensor q = nn::split_heads((*r.q_proj)(x), 2), k = nn::split_heads((*r.k_proj)(x), 2);
  auto A = att.to_vector<double>(), Q = contiguous(q).to_vector<double>(), K = contiguous(k).to_vector<double>();
  auto flags = key_flags(7);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t n = 0; n < 7; ++n)
      for (int64_t m = 0; m < 7; ++m) {
        double s = 0;
        for (int64_t d = 0; d < 4; ++d) s += Q[((b * 2 + 1) * 7 + n) * 4 + d] * K[((b * 2 + 1) * 7 + m) * 4 + d];
        const double expect = m <= n && flags[b * 7 + m] ? std::pow(0.8, double(n - m)) * s / 2.0 : 0.0;
        CHECK(A[((b * 2 + 1) * 7 + n) * 7 + m] == doctest::Approx(expect).epsilon(1e-12));
      }
}

TEST_CASE("retention gradcheck: chunked and parallel forms, key mask, gate, bias=false, per-head decay") {
  for (std::string spec : {"retention(heads=2, chunk=2)",
                           "retention(heads=2, key_size=3, value_size=2, decay=0.6, "
                           "chunk=3, gate=hard_concrete)",
                           "retention(heads=2, decay=0.5+0.9, bias=false, chunk=1)"}) {
    for (bool need_weights : {false, true}) {
      CAPTURE(spec);
      CAPTURE(need_weights);
      auto a = ret64(spec);
      std::vector<Tensor> inputs = {nc_randn({2, 5, 8}, 3)};
      for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
      Tensor mask = key_mask_tensor(5);
      check_grad(
          spec, [&](const std::vector<Tensor>& in) { return a->forward(in[0], {}, mask, false, need_weights).output; },
          inputs);
    }
  }
  // The chunked form on its own, every input non-contiguous.
  const std::vector<double> gammas = {0.7, 0.95};
  check_grad("retention::chunked",
             [&](const std::vector<Tensor>& in) { return ret::chunked(in[0], in[1], in[2], gammas, 2); },
             {nc_randn({1, 2, 5, 3}, 4), nc_randn({1, 2, 5, 3}, 5), nc_randn({1, 2, 5, 2}, 6)});
}

TEST_CASE("decayed_exclusive_scan: the naive twin, its gradient, and its errors") {
  Generator g(21);
  const std::vector<double> decay = {0.5, 0.9, 1.0};
  for (int64_t J : {int64_t(1), int64_t(2), int64_t(7)}) {
    CAPTURE(J);
    Tensor a = randn({2, 3, J, 4, 5}, g, kFloat64);
    CHECK(allclose(nn::scan::decayed_exclusive_scan(a, decay), nn::scan::decayed_exclusive_scan_reference(a, decay),
                   1e-12, 1e-12));
    Tensor a32 = to(a, kFloat32);
    CHECK(allclose(nn::scan::decayed_exclusive_scan(a32, decay), nn::scan::decayed_exclusive_scan_reference(a32, decay),
                   1e-5, 1e-5));
  }
  // S[0] is zero and S[1] = A[0], whatever the decay.
  Tensor a = randn({1, 3, 3, 2}, g, kFloat64);
  Tensor s = nn::scan::decayed_exclusive_scan(a, decay);
  CHECK(allclose(narrow(s, 2, 0, 1), zeros({1, 3, 1, 2}, kFloat64), 0, 0));
  CHECK(allclose(narrow(s, 2, 1, 1), narrow(a, 2, 0, 1), 0, 0));
  check_grad("decayed_exclusive_scan",
             [&](const std::vector<Tensor>& in) { return nn::scan::decayed_exclusive_scan(in[0], decay); },
             {nc_randn({2, 3, 6, 4}, 8)});
  auto err = [&](const Tensor& x, const std::vector<double>& d) {
    try {
      nn::scan::decayed_exclusive_scan(x, d);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err(randn({3, 4}, g, kFloat64), decay).find("expected a of shape (B, h, J, ...), got (3,4)") != std::string::npos);
  CHECK(err(randn({1, 2, 3}, g, kFloat64), decay).find("3 decay factors for 2 heads") != std::string::npos);
  CHECK(err(zeros({1, 3, 2}, kInt64), decay).find("expected a floating dtype") != std::string::npos);
}

TEST_CASE("retention chunked: the recorded graph does not grow with the number of blocks (linear cost)") {
  // One batched product per step for all blocks and one scan: the same ops at 2 blocks and at 64,
  // so the backward pass never forms a whole-length gradient per block.
  const std::vector<double> gammas = {0.7, 0.95};
  auto ops_at = [&](int64_t N) {
    Generator g(3);
    Tensor q = randn({1, 2, N, 4}, g).requires_grad_(), k = randn({1, 2, N, 4}, g), v = randn({1, 2, N, 3}, g);
    OpTrace trace;
    {
      OpTraceGuard guard(trace);
      ret::chunked(q, k, v, gammas, 8);
    }
    return trace.ops().size();
  };
  CHECK(ops_at(16) == ops_at(512));
  CHECK(ops_at(16) > 0);
}

TEST_CASE("retention forward_step (the recurrent form) equals the causal forward, the state is h dk dv per sequence") {
  auto a = ret64("retention(heads=2, key_size=3, value_size=5, chunk=2, gate=hard_concrete)");
  Generator g(9);
  Tensor x = randn({2, 9, 8}, g, kFloat64);
  Tensor want = a->forward(x).output;  // (2, 9, 8)
  auto cache = a->make_cache(2, 4);    // max_len does not bound a recurrent state
  CHECK(cache->numel() == 2 * 2 * 3 * 5);
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t t : {1, 3, 1, 2, 2}) {
    parts.push_back(a->forward_step(narrow(x, 1, at, t), *cache));
    at += t;
  }
  CHECK(cache->length == 9);
  CHECK(cache->numel() == 2 * 2 * 3 * 5);
  CHECK(allclose(cat(parts, 1), want, 1e-10, 1e-12));
}

TEST_CASE("retention: defaults, spec, and a pruned layer equal to the masked one with its heads' decays") {
  auto a = ret64("retention(heads=3, gate=hard_concrete)", 12);
  auto& r = as_ret(a);
  CHECK(r.gammas == std::vector<double>{1 - 1.0 / 32, 1 - 1.0 / 64, 1 - 1.0 / 128});
  CHECK(r.chunk == 64);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"q_proj.weight(12,12)", "q_proj.bias(12)", "k_proj.weight(12,12)",
                                          "k_proj.bias(12)", "v_proj.weight(12,12)", "v_proj.bias(12)",
                                          "g_proj.weight(12,12)", "g_proj.bias(12)", "out_proj.weight(12,12)",
                                          "out_proj.bias(12)", "gate.log_alpha(3)"});
  Generator g(8);
  {
    NoGradGuard ng;
    kernels::copy_(r.gate->log_alpha, randn({3}, g, kFloat64));
    kernels::copy_(r.head_mask, from_vector<double>({1, 0, 1}));
  }
  Tensor x = randn({2, 5, 12}, g, kFloat64);
  auto p = a->prune_heads({0, 2});
  CHECK(as_ret(p).gammas == std::vector<double>{r.gammas[0], r.gammas[2]});
  CHECK(allclose(p->forward(x).output, a->forward(x).output, 1e-12, 1e-12));
  // The pruned spec pins the kept decays: a layer built from it and loaded with the state is the same.
  auto again = make_attention(p->spec(), 12);
  again->to(kFloat64);
  again->load_state_dict(p->state_dict());
  again->eval();
  CHECK(allclose(again->forward(x).output, p->forward(x).output, 1e-14, 1e-14));
  CHECK(make_attention("retention(heads=2, decay=0.9)", 8)->spec() ==
        "retention(heads=2, key_size=4, value_size=4, bias=true, decay=0.9, chunk=64, causal=true, attn_dropout=0)");
}

TEST_CASE("retention errors name the variant, the option, the value and what is allowed") {
  auto err = [](const std::string& spec) { return error_of([&] { make_attention(spec, 8); }); };
  CHECK(err("retention(heads=2, causal=false)")
            .find("retention: option causal=false: retention is causal by construction; allowed: true") !=
        std::string::npos);
  CHECK(err("retention(heads=2, chunk=0)").find("retention: option chunk=0: must be a positive integer (>= 1)") !=
        std::string::npos);
  for (std::string bad : {"0", "1", "1.5", "-0.2", "abc"})
    CHECK(err("retention(heads=2, decay=" + bad + ")")
              .find("retention: option decay=" + bad + ": \"" + bad + "\" is not a number in (0, 1)") !=
          std::string::npos);
  CHECK(err("retention(heads=2, decay=0.5+0.6+0.7)").find("expected one number or heads=2 numbers joined by +") !=
        std::string::npos);
  CHECK(err("retention(heads=2, attn_dropout=0.1)").find("retention: option attn_dropout=0.1") != std::string::npos);
  auto a = ret64("retention(heads=2)");
  Generator g(10);
  Tensor x = randn({2, 4, 8}, g, kFloat64);
  CHECK(error_of([&] { a->forward(x, x); }).find("retention: self-attention only") != std::string::npos);
  Tensor varying = from_vector<bool>(std::vector<bool>(16, true), {1, 1, 4, 4});
  CHECK(error_of([&] { a->forward(x, {}, varying); }).find("retention: only key masks are supported") !=
        std::string::npos);
  CHECK(error_of([&] {
          a->forward(x, {}, ones({2, 1, 1, 4}));
        }).find("retention: the mask must be bool") != std::string::npos);
}

// The example in docs/attention.md, compiled and run.
TEST_CASE("retention doc example") {
  manual_seed(0);
  auto attn = nn::make_attention("retention(heads=4, chunk=16)", 32);  // gamma_i = 1 - 2^(-5-i)
  attn->eval();
  Generator gen(1);
  Tensor x = randn({2, 40, 32}, gen);                              // (B, N, D)
  Tensor y = attn->forward(x).output;                              // chunked form, (2, 40, 32)
  auto r = attn->forward(x, {}, {}, true, /*need_weights=*/true);  // parallel form
  Tensor a = r.attention;                                          // (2, 4, 40, 40): decayed scores
  auto cache = attn->make_cache(2, 40);                            // 4 states of (8, 8) per sequence
  Tensor last = attn->forward_step(narrow(x, 1, 0, 40), *cache);   // recurrent form
  CHECK(a.shape() == Dims{2, 4, 40, 40});
  CHECK(allclose(y, r.output, 1e-4, 1e-5));
  CHECK(allclose(last, y, 1e-4, 1e-5));
}

TEST_CASE("retention golden: the file's retention cases are the ones tested here, and every case is one of ours") {
  check_golden_cases(golden(), kCases, "retention_");
  for (const std::string& c : golden().tensor_cases())
    CHECK((c.rfind("retention_", 0) == 0 || c.rfind("diff_", 0) == 0));
}

// diff (docs/attention.md, "diff"): golden files from PyTorch, the fused path against the composed
// one, the identity that each row of the difference map sums to 1 - lambda, gradients, pruning,
// the decoding cache and the errors.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "autograd/grad_helpers.hpp"
#include "golden.hpp"
#include "nn/attention/diff.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;

namespace {

// Keep in sync with the diff_* CASES in diff_retention_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {"diff_self_layer3", "diff_causal_gate", "diff_cross_mask"};

const GoldenFile& golden() { return reference_file("diff_retention_golden.safetensors"); }

std::shared_ptr<nn::Attention> diff64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(7);
  auto a = make_attention(spec, d_model);
  a->to(kFloat64);
  a->eval();
  return a;
}

nn::DiffAttention& as_diff(const std::shared_ptr<nn::Attention>& a) { return static_cast<nn::DiffAttention&>(*a); }

// A (B, 1, N, M) mask with every entry allowed with probability 0.7, key 0 always, and batch 1's
// query row 1 allowing nothing.
Tensor query_mask(int64_t n, int64_t m, uint64_t seed) {
  Generator g(seed);
  std::vector<double> u = rand({2, 1, n, m}, g, kFloat64).to_vector<double>();
  std::vector<bool> allowed(u.size());
  for (size_t i = 0; i < u.size(); ++i) allowed[i] = u[i] < 0.7 || i % m == 0;
  for (int64_t j = 0; j < m; ++j) allowed[(n + 1) * m + j] = false;
  return from_vector(allowed, {2, 1, n, m});
}

}  // namespace

TEST_CASE("diff golden: self-attention, layer 3 (lambda_init 0.8 - 0.6 e^-0.6)") {
  run_golden_case(golden(), "diff_self_layer3", {.also_without_weights = true});
}
TEST_CASE("diff golden: causal, key_size=value_size=3, hard_concrete gate, head_mask") {
  run_golden_case(golden(), "diff_causal_gate", {.also_without_weights = true});
}
TEST_CASE("diff golden: cross-attention, query-dependent mask with an empty row, bias=false") {
  run_golden_case(golden(), "diff_cross_mask", {.also_without_weights = true});
}

TEST_CASE("diff parameters: names, shapes, the lambda init N(0, 0.1^2) and lambda_init by depth") {
  auto a = make_attention("diff(heads=2, gate=hard_concrete)", 16);
  std::vector<std::string> names;
  for (auto& [n, p] : a->named_parameters()) names.push_back(n + to_string(p.shape()));
  CHECK(names == std::vector<std::string>{"lambda_q1(4)", "lambda_k1(4)", "lambda_q2(4)", "lambda_k2(4)",
                                          "q_proj.weight(16,16)", "q_proj.bias(16)", "k_proj.weight(16,16)",
                                          "k_proj.bias(16)", "v_proj.weight(16,16)", "v_proj.bias(16)",
                                          "out_proj.weight(16,16)", "out_proj.bias(16)", "subln.weight(8)",
                                          "gate.log_alpha(2)"});  // q/k: h * 2 * dk rows, dk = D/(2h) = 4
  CHECK(a->spec() ==
        "diff(heads=2, key_size=4, value_size=8, layer=1, bias=true, causal=false, attn_dropout=0, "
        "gate=hard_concrete, gate_init=2, gate_temperature=0.33, gate_gamma=-0.1, gate_zeta=1.1, "
        "gate_hard=false)");
  // 4 x 2000 draws of N(0, 0.01): the sample std is 0.1 within a few percent, the mean near 0.
  auto big = make_attention("diff(heads=1, key_size=2000, value_size=2)", 4);
  auto& d = as_diff(big);
  std::vector<double> all;
  for (const Tensor& t : {d.lambda_q1, d.lambda_k1, d.lambda_q2, d.lambda_k2})
    for (double v : t.to_vector<double>()) all.push_back(v);
  double m = 0, s = 0;
  for (double v : all) m += v / all.size();
  for (double v : all) s += (v - m) * (v - m) / all.size();
  CHECK(std::abs(m) < 0.01);
  CHECK(std::sqrt(s) == doctest::Approx(0.1).epsilon(0.05));
  CHECK(as_diff(make_attention("diff(heads=2)", 8)).lambda_init() == doctest::Approx(0.2).epsilon(1e-15));
  CHECK(as_diff(make_attention("diff(heads=2, layer=4)", 8)).lambda_init() ==
        doctest::Approx(0.8 - 0.6 * std::exp(-0.9)).epsilon(1e-15));
}

TEST_CASE("diff: the fused path equals the composed one, each map row sums to 1 - lambda, empty rows are zero") {
  for (std::string spec : {"diff(heads=2, key_size=3, value_size=5)", "diff(heads=2, causal=true, layer=5)"}) {
    CAPTURE(spec);
    auto a = diff64(spec);
    const bool causal = spec.find("causal") != std::string::npos;
    Generator g(1);
    Tensor x = randn({2, 4, 8}, g, kFloat64), ctx = causal ? Tensor() : randn({2, 6, 8}, g, kFloat64);
    const int64_t M = causal ? 4 : 6;
    Tensor mask = query_mask(4, M, 2);
    auto composed = a->forward(x, ctx, mask, false, true);
    auto fused = a->forward(x, ctx, mask, false, false);
    CHECK(allclose(fused.output, composed.output, 1e-10, 1e-12));
    CHECK_FALSE(fused.attention.defined());
    // sum_m (P1 - lambda P2)[n, m] = 1 - lambda on rows with an allowed key, 0 on the empty row.
    const double lam = as_diff(a).lambda().item();
    Tensor rows = sum(composed.attention, {-1});  // (B, h, N)
    auto r = rows.to_vector<double>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t n = 0; n < 4; ++n)
          CHECK(r[(b * 2 + i) * 4 + n] == doctest::Approx(b == 1 && n == 1 ? 0.0 : 1 - lam).epsilon(1e-12));
    // The empty row's head outputs are zero: the output row is out_proj.bias.
    CHECK(allclose(select(select(fused.output, 0, 1), 0, 1), as_diff(a).out_proj->bias, 1e-12, 1e-12));
  }
}

TEST_CASE("diff gradcheck: both paths, self, causal, masked, cross-attention, gated, lambda vectors") {
  for (std::string spec : {"diff(heads=2, key_size=3)", "diff(heads=2, causal=true, value_size=3)",
                           "diff(heads=2, bias=false, layer=3)", "diff(heads=2, gate=hard_concrete)"}) {
    for (bool need_weights : {false, true}) {
      CAPTURE(spec);
      CAPTURE(need_weights);
      auto a = diff64(spec);
      const bool causal = spec.find("causal") != std::string::npos;
      std::vector<Tensor> inputs = {nc_randn({2, 3, 8}, 3), nc_randn({2, 4, 8}, 4)};
      for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
      Tensor mask = query_mask(3, causal ? 3 : 4, 5);
      check_grad(
          spec,
          [&](const std::vector<Tensor>& in) {
            return causal ? a->forward(in[0], {}, mask, false, need_weights).output
                          : a->forward(in[0], in[1], mask, false, need_weights).output;
          },
          inputs);
    }
  }
}

TEST_CASE("diff: a pruned layer pins every size") {
  auto a = diff64("diff(heads=3, gate=hard_concrete, layer=2)", 12);
  auto p = a->prune_heads({0, 2});
  CHECK(as_diff(p).q_proj->weight.shape() == Dims{8, 12});  // 2 heads x 2 halves x dk = 2
  CHECK(p->spec().find("heads=2, key_size=2, value_size=4, layer=2") != std::string::npos);
}

TEST_CASE("diff's decoding cache holds both key halves") {
  auto a = diff64("diff(heads=2, key_size=3, value_size=5, gate=hard_concrete)");
  auto cache = a->make_cache(2, 10);
  CHECK(cache->numel() == 2 * (4 * 10 * 3 + 2 * 10 * 5));  // B (2h max_len dk + h max_len dv)
}

TEST_CASE("diff errors name the variant, the option, the value and what is allowed") {
  auto err = [](const std::string& spec, int64_t d = 8) { return error_of([&] { make_attention(spec, d); }); };
  CHECK(as_diff(make_attention("diff(heads=4)", 8)).config.key_size == 1);  // 8 / (2*4)
  CHECK(err("diff(heads=8)")
            .find("diff: key_size defaults to d_model/(2 heads), but 2*heads=16 does not divide "
                  "d_model=8; give key_size explicitly") != std::string::npos);
  CHECK(err("diff(heads=2, layer=0)").find("diff: option layer=0: must be a 1-based depth >= 1") != std::string::npos);
  CHECK(err("diff(heads=2, window=3)").find("diff: unknown option window") != std::string::npos);
  CHECK(err("diff(heads=2, gate=soft)").find("gate=soft: expected one of none, hard_concrete") != std::string::npos);
  auto a = diff64("diff(heads=2, causal=true)");
  Generator g(10);
  Tensor x = randn({1, 3, 8}, g, kFloat64);
  CHECK(error_of([&] { a->forward(x, x); }).find("diff: causal attention needs self-attention") != std::string::npos);
  CHECK(error_of([&] {
          a->forward(x, {}, ones({1, 1, 3, 3}));
        }).find("diff: the mask must be bool") != std::string::npos);
  CHECK(error_of([&] {
          a->forward(randn({1, 3, 6}, g, kFloat64));
        }).find("diff: input must be (B, N, 8)") != std::string::npos);
}

// The example in docs/attention.md, compiled and run.
TEST_CASE("diff doc example") {
  manual_seed(0);
  auto attn = nn::make_attention("diff(heads=4, layer=2)", 32);  // dk = 32/(2*4) = 4, dv = 8
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);  // (B, N, D)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  Tensor y = r.output;                                  // (2, 10, 32)
  Tensor w = r.attention;                               // (2, 4, 10, 10): P1 - lambda P2
  Tensor fast = attn->forward(x, {}, {}, true).output;  // two fused kernel passes
  CHECK(y.shape() == Dims{2, 10, 32});
  CHECK(w.shape() == Dims{2, 4, 10, 10});
  CHECK(allclose(fast, y, 1e-4, 1e-5));
}

TEST_CASE("diff golden: the file's diff cases are the ones tested here") {
  check_golden_cases(golden(), kCases, "diff_");
}

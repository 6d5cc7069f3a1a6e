// mla (docs/attention.md, "mla"): parameter names and shapes, golden files from an independent
// PyTorch module (tests/reference/mla_reference.py), float64 gradients on both paths, the fused
// path against the composed one, both decoding paths against the causal forward, the
// representation of any mha, pruning and the spec-string errors.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_helpers.hpp"
#include "golden.hpp"
#include "nn/attention/cp_decomposition.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/mla.hpp"
#include "nn/attention/registry.hpp"
#include "tensor/kernels.hpp"

using namespace attnlab;
using namespace attnlab::testing;
using nn::make_attention;

namespace {

std::shared_ptr<nn::LatentAttention> mla64(const std::string& spec, int64_t d_model = 8) {
  manual_seed(7);
  auto a = std::dynamic_pointer_cast<nn::LatentAttention>(make_attention(spec, d_model));
  REQUIRE(a);
  a->to(kFloat64);
  a->eval();
  return a;
}

// Parameters and buffers as "name(shape)".
std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.named_parameters()) {
    std::string s = n + "(";
    for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? "," : "") + std::to_string(t.shape()[i]);
    out.push_back(s + ")");
  }
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  Tensor d = dst;
  kernels::copy_(d, src);
}

// Keep in sync with CASES in mla_reference.py.
const std::vector<std::string> kCases = {"mla_self", "mla_causal_gate", "mla_masked", "mla_q_rank", "mla_cross"};

void run_case(const std::string& name) {
  GoldenCaseOptions opt;
  opt.also_without_weights = true;  // pins the fused path too
  run_golden_case(reference_file("mla_golden.safetensors"), name, opt);
}

}  // namespace

TEST_CASE("mla parameters: names and shapes with q_rank = 0 and q_rank > 0, no biases, head_mask") {
  // h = 2, dk = 3, dr = 2, dv = 5, r = 4, D = 8
  auto plain = make_attention("mla(heads=2, kv_rank=4, key_size=3, rope_size=2, value_size=5)", 8);
  CHECK(names_of(*plain) == std::vector<std::string>{"q_proj.weight(10,8)", "kv_down.weight(6,8)", "kv_norm.weight(4)",
                                                     "kv_up.weight(16,4)", "out_proj.weight(8,10)"});
  const std::string gated = "mla(heads=2, kv_rank=4, q_rank=3, key_size=3, rope_size=2, value_size=5, gate=hard_concrete)";
  auto compressed = make_attention(gated, 8);
  CHECK(names_of(*compressed) == std::vector<std::string>{"q_down.weight(3,8)", "q_norm.weight(3)", "q_up.weight(10,3)",
                                                          "kv_down.weight(6,8)", "kv_norm.weight(4)",
                                                          "kv_up.weight(16,4)", "out_proj.weight(8,10)",
                                                          "gate.log_alpha(2)"});
  auto bufs = compressed->named_buffers();
  REQUIRE(bufs.size() == 1);
  CHECK(bufs[0].first == "head_mask");
  CHECK(bufs[0].second.shape() == Dims{2});
  // Defaults: r = D/4, rq = 0, dk = dv = D/h, dr = dk/2; spec() pins every size and round-trips.
  auto d = make_attention("mla(heads=4)", 32);
  CHECK(d->spec() ==
        "mla(heads=4, kv_rank=8, q_rank=0, key_size=8, rope_size=4, value_size=8, causal=false, "
        "attn_dropout=0, absorb=true)");
  CHECK(make_attention(compressed->spec(), 8)->spec() == compressed->spec());
  CHECK(compressed->l0_penalty().item<float>() > 0);
  CHECK(plain->l0_penalty().item<float>() == 0);
}

TEST_CASE("mla golden: self-attention, dk != dv") { run_case("mla_self"); }
TEST_CASE("mla golden: causal, rope_size > key_size, hard_concrete gate clamped at 0, head_mask") {
  run_case("mla_causal_gate");
}
TEST_CASE("mla golden: query-dependent mask with a fully masked row, four heads") { run_case("mla_masked"); }
TEST_CASE("mla golden: q_rank > 0 (query latent with its RMSNorm), padding mask") { run_case("mla_q_rank"); }
TEST_CASE("mla golden: cross-attention with default sizes, q_rank > 0, padding mask") { run_case("mla_cross"); }
TEST_CASE("mla golden: the file and this test name the same cases") {
  check_golden_cases(reference_file("mla_golden.safetensors"), kCases);
}

TEST_CASE("mla gradcheck on the composed and the fused path: q_rank 0 and > 0, causal, mask, cross, gates") {
  struct Case {
    std::string spec;
    bool cross, causal, masked;
  };
  for (const Case& c :
       {Case{"mla(heads=2, kv_rank=3, key_size=2, rope_size=2, value_size=3)", false, false, false},
        Case{"mla(heads=2, kv_rank=3, q_rank=3, key_size=2, rope_size=2)", false, true, false},
        Case{"mla(heads=2, kv_rank=2, key_size=2, rope_size=4, value_size=2)", false, false, true},
        Case{"mla(heads=2, kv_rank=3, q_rank=2, key_size=2, rope_size=2, value_size=2)", true, false, true},
        Case{"mla(heads=2, kv_rank=3, key_size=2, rope_size=2, gate=hard_concrete)", false, true, true}}) {
    auto a = mla64(c.spec);
    std::vector<Tensor> inputs = {nc_randn({2, 3, 8}, 1), nc_randn({2, 4, 8}, 2)};
    for (auto& [n, p] : a->named_parameters()) inputs.push_back(p);
    const int64_t M = c.cross ? 4 : 3;
    Tensor mask;  // per query, with batch 1's row 1 fully masked
    if (c.masked) {
      std::vector<bool> m(2 * 3 * M, true);
      for (int64_t j = 0; j < M; ++j) m[(3 + 1) * M + j] = false;
      m[1] = false;
      mask = from_vector<bool>(m, {2, 1, 3, M});
    }
    for (bool need_weights : {true, false}) {
      CAPTURE(need_weights);
      check_grad(
          c.spec,
          [&](const std::vector<Tensor>& in) {
            return a->forward(in[0], c.cross ? in[1] : Tensor(), mask, c.causal, need_weights).output;
          },
          inputs);
    }
  }
}

TEST_CASE("mla's fused path equals the composed path across several tiles, output and gradients") {
  auto a = mla64("mla(heads=2, kv_rank=3, q_rank=3, key_size=2, rope_size=2, value_size=2)");
  Generator g(5);
  Tensor x = randn({1, 150, 8}, g, kFloat64).requires_grad_();  // 150 > one 128-row query tile
  Tensor mask = gt(rand({1, 1, 150, 150}, g, kFloat64), 0.2);
  Tensor gy = randn({1, 150, 8}, g, kFloat64);
  auto run = [&](bool need_weights) {
    a->zero_grad();
    x.set_grad({});
    Tensor y = a->forward(x, {}, mask, true, need_weights).output;
    sum(y * gy).backward();
    std::vector<Tensor> out = {y.detach(), x.grad()};
    for (auto& [n, p] : a->named_parameters()) out.push_back(clone(p.grad()));
    return out;
  };
  auto fused = run(false), composed = run(true);
  for (size_t i = 0; i < fused.size(); ++i) check_close("tensor " + std::to_string(i), fused[i], composed[i]);
}

TEST_CASE("mla attention dropout acts in train mode only, on both paths, the probabilities are taken before it") {
  auto a = mla64("mla(heads=2, kv_rank=3, key_size=2, rope_size=2, attn_dropout=0.5)");
  Generator g(8);
  Tensor x = randn({2, 5, 8}, g, kFloat64);
  for (bool need_weights : {false, true}) {
    CAPTURE(need_weights);
    a->eval();
    auto plain = a->forward(x, {}, {}, true, need_weights);
    check_close("eval is deterministic", a->forward(x, {}, {}, true, need_weights).output, plain.output);
    a->train();
    auto dropped = a->forward(x, {}, {}, true, need_weights);
    CHECK_FALSE(allclose(dropped.output, plain.output, 1e-6, 1e-6));
    if (need_weights) check_close("probabilities", dropped.attention, plain.attention);
  }
}

TEST_CASE("mla decoding: the cache holds r + dr numbers per token, plain and absorbed steps equal the causal forward") {
  for (const char* q : {"", ", q_rank=3"}) {
    const std::string base = std::string("mla(heads=2, kv_rank=3, key_size=2, rope_size=4, value_size=3") + q;
    for (const char* absorb : {"true", "false"}) {
      const std::string spec = base + ", gate=hard_concrete, absorb=" + absorb + ")";
      CAPTURE(spec);
      auto a = mla64(spec);
      copy_into(a->gate->log_alpha, from_vector<double>({-0.5, 1.0}));
      Generator g(9);
      Tensor x = randn({2, 7, 8}, g, kFloat64);
      Tensor want = a->forward(x, {}, {}, true).output;  // (2, 7, 8)
      auto cache = a->make_cache(2, 10);
      CHECK(cache->numel() == 2 * 10 * (3 + 4));  // B * max_len * (r + dr), not B * max_len * h * (dk + dv)
      std::vector<Tensor> parts;
      int64_t at = 0;
      for (int64_t t : {1, 3, 1, 2}) {
        parts.push_back(a->forward_step(narrow(x, 1, at, t), *cache));
        at += t;
      }
      check_close("steps", cat(parts, 1), want);
    }
  }
}

TEST_CASE("mla represents any bias-free mha of the same sizes when r = h (dk + dv)") {
  // mha: h = 2, dk = dv = 2, D = 8. mla: r = h (dk + dv) = 8, dr = 2. The construction:
  //  - kv_down's latent rows are delta * A, A = [Wk_0; Wv_0; Wk_1; Wv_1] (kv_up's head layout),
  //    and kv_up is the identity, so before RMSNorm the latent is delta * y, y = x A^T = (k, v);
  //  - the RoPE query rows are zero (so kr does not matter) and the no-RoPE query rows are the
  //    mha's scaled by sqrt((dk + dr) / dk), which turns mla's 1/sqrt(dk + dr) into mha's 1/sqrt(dk).
  // RMSNorm then gives c = y * w delta / sqrt(delta^2 mean(y^2) + eps) per position. Two forms of
  // the statement are exact to float64 rounding (docs/attention.md, "mla"):
  //  1. any input, in RMSNorm's linear regime: w = sqrt(eps) / delta makes c = y / sqrt(1 +
  //     delta^2 mean(y^2) / eps), at delta = 1e-9 and mean(y^2) ~ 10 a factor 1 - 5e-12;
  //  2. delta = 1 and inputs whose latent has a known RMS: x = Z (A A^T)^-1 A has x A^T = Z, and
  //     Z's rows of norm sqrt(r) give mean(y^2) = 1, so w = sqrt(1 + eps) makes c = y.
  const int64_t h = 2, dk = 2, dv = 2, dr = 2, r = h * (dk + dv), D = 8;
  const double eps = 1e-6;
  auto mha = make_attention("mha(heads=2, key_size=2, value_size=2, bias=false, causal=true)", D);
  mha->to(kFloat64);
  auto& m = static_cast<nn::MultiHeadAttention&>(*mha);
  auto a = mla64("mla(heads=2, kv_rank=8, key_size=2, rope_size=2, value_size=2, causal=true)");
  std::vector<Tensor> latent_rows, q_rows;
  for (int64_t i = 0; i < h; ++i) {
    latent_rows.push_back(narrow(m.k_proj->weight, 0, i * dk, dk));  // (dk, D)
    latent_rows.push_back(narrow(m.v_proj->weight, 0, i * dv, dv));  // (dv, D)
    q_rows.push_back(narrow(m.q_proj->weight, 0, i * dk, dk) * std::sqrt(double(dk + dr) / dk));
    q_rows.push_back(zeros({dr, D}, kFloat64));
  }
  const Tensor A = cat(latent_rows, 0);  // (r, D)
  copy_into(a->kv_up->weight, eye(r, kFloat64));
  copy_into(a->q_proj->weight, cat(q_rows, 0));
  copy_into(a->out_proj->weight, m.out_proj->weight);
  auto set_latent = [&](double delta, double w) {
    copy_into(narrow(a->kv_down->weight, 0, 0, r), A * delta);
    copy_into(a->kv_norm->weight, full({r}, w, kFloat64));
  };
  Generator g(4);
  Tensor x = randn({2, 6, D}, g, kFloat64);
  Tensor want = mha->forward(x).output;

  set_latent(1e-9, std::sqrt(eps) / 1e-9);
  check_close("linear regime, any input", a->forward(x).output, want, 1e-10, 1e-12);

  set_latent(1.0, std::sqrt(1 + eps));
  CHECK_FALSE(allclose(a->forward(x).output, want, 1e-4, 1e-4));  // a random input's RMS varies: not equal
  Tensor z = randn({12, r}, g, kFloat64);
  z = z * rsqrt(mean(square(z), {-1}, true));  // (12, r), mean(z^2) = 1
  // x = Z (A A^T)^-1 A; the solver's small ridge is undone by one step of iterative refinement.
  const Tensor gram = matmul(A, transpose(A, 0, 1));                                          // (r, r)
  Tensor xs = matmul(nn::solve_normal_equations(gram, z), A);                                 // (12, D)
  xs = xs + matmul(nn::solve_normal_equations(gram, z - matmul(xs, transpose(A, 0, 1))), A);  // x A^T = Z
  Tensor xk = reshape(xs, {2, 6, D});
  check_close("latent of known RMS", a->forward(xk).output, mha->forward(xk).output, 1e-10, 1e-12);
}

TEST_CASE("mla bad options and inputs are typed errors naming the variant, option, value and what is allowed") {
  auto err = [](const std::string& spec, int64_t d = 8) { return error_of([&] { make_attention(spec, d); }); };
  CHECK(err("mla(heads=2, rope_size=3)").find("mla: option rope_size=3: must be a positive even integer") !=
        std::string::npos);
  CHECK(err("mla(heads=2, key_size=6)").find("rope_size defaults to key_size/2, but key_size=6 gives 3") !=
        std::string::npos);
  CHECK(err("mla(heads=3)").find("key_size defaults to d_model/heads, but heads=3 does not divide d_model=8") !=
        std::string::npos);
  CHECK_NOTHROW(make_attention("mla(heads=3, key_size=4, value_size=2)", 8));  // explicit sizes
  CHECK(err("mla(heads=2)", 6).find("kv_rank defaults to d_model/4") != std::string::npos);
  const std::string bias = err("mla(heads=2, bias=false)");
  CHECK(bias.find("mla: unknown option bias") != std::string::npos);
  CHECK(bias.find("kv_rank") != std::string::npos);  // lists the allowed options
  CHECK(bias.find("rope_size") != std::string::npos);
  CHECK(err("mla(heads=2, q_rank=-1)").find("q_rank=-1") != std::string::npos);
  CHECK(err("mla(heads=2, kv_rank=0)").find("kv_rank=0: must be a positive integer") != std::string::npos);
  CHECK_THROWS_AS(make_attention("mla(heads=2, absorb=maybe)", 8), ValueError);

  auto a = mla64("mla(heads=2)");
  Generator g(1);
  Tensor x = randn({2, 3, 8}, g, kFloat64), ctx = randn({2, 4, 8}, g, kFloat64);
  CHECK(error_of([&] { a->forward(x, ctx, {}, true); }).find("mla: causal attention needs self-attention") !=
        std::string::npos);
  CHECK_THROWS_AS(a->forward(randn({2, 3, 7}, g, kFloat64)), ShapeError);
  CHECK_THROWS_AS(a->forward(x, {}, from_vector<bool>({true, false}, {1, 1, 1, 2})), ShapeError);
  auto cache = a->make_cache(2, 2);
  CHECK(error_of([&] { a->forward_step(x, *cache); }).find("exceed the cache's max_len 2") != std::string::npos);
}

// The example in docs/attention.md, compiled and run.
TEST_CASE("mla doc example") {
  manual_seed(0);
  auto attn = nn::make_attention("mla(heads=4, kv_rank=8, q_rank=16)", 32);  // dk = dv = 8, dr = 4
  Generator gen(1);
  Tensor x = randn({2, 10, 32}, gen);  // (B, N, D)
  auto r = attn->forward(x, {}, {}, /*causal=*/true, /*need_weights=*/true);
  CHECK(r.output.shape() == Dims{2, 10, 32});
  CHECK(r.attention.shape() == Dims{2, 4, 10, 10});  // (B, h, N, M)
  attn->eval();
  auto cache = attn->make_cache(/*batch=*/2, /*max_len=*/10);
  Tensor first = attn->forward_step(narrow(x, 1, 0, 1), *cache);  // (2, 1, 32)
  CHECK(cache->numel() == 2 * 10 * (8 + 4));                      // (r + dr) per token
  CHECK(allclose(first, narrow(r.output, 1, 0, 1), 1e-5, 1e-5));
}

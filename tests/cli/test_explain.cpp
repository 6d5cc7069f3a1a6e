// `attnlab explain` (experiments/cli/explain.cpp): the traced steps of mha, the FLOP convention on
// its projections, a sub-quadratic variant against mha at large N, and the error paths.
#include <sstream>

#include "experiments/cli/commands.hpp"
#include "experiments/cli/explain.hpp"
#include "helpers.hpp"

using namespace attnlab;

namespace {

struct Run {
  int status;
  std::string out, err;
};

Run explain(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = cli::run_explain(args, out, err);
  return {status, out.str(), err.str()};
}

}  // namespace

TEST_CASE("explain mha: projections are matmuls with the formula's FLOPs, softmax-free fused core counted") {
  const int64_t B = 2, N = 16, D = 32, h = 4, dk = 8;
  auto r = cli::explain_attention("mha(heads=4)", D, N, B);
  CHECK(r.spec.find("mha(") == 0);
  std::vector<const cli::ExplainStep*> matmuls;
  for (const auto& s : r.steps)
    if (s.op.name == "matmul") matmuls.push_back(&s);
  REQUIRE(matmuls.size() >= 4);  // q, k, v and out projections
  // Each projection: (B, N, D) x (D, h*dk) -> (B, N, h*dk), 2 * B * N * D * h*dk FLOPs.
  for (int i = 0; i < 3; ++i) {
    CHECK(matmuls[i]->op.inputs[0] == Dims{B, N, D});
    CHECK(matmuls[i]->op.inputs[1] == Dims{D, h * dk});
    CHECK(matmuls[i]->op.output == Dims{B, N, h * dk});
    CHECK(matmuls[i]->flops == 2 * B * N * D * h * dk);
  }
  CHECK(matmuls.back()->op.output == Dims{B, N, D});
  CHECK(matmuls.back()->flops == 2 * B * N * h * dk * D);
  // Each projection's matmul is labelled by its module, found through the weight it reads.
  CHECK(matmuls[0]->module == "attention.q_proj");
  CHECK(matmuls[1]->module == "attention.k_proj");
  CHECK(matmuls[2]->module == "attention.v_proj");
  CHECK(matmuls.back()->module == "attention.out_proj");
  // The attention core runs fused; it counts every (query, key) pair: 2 dk + 5 + 2 dv each.
  bool core = false;
  for (const auto& s : r.steps)
    if (s.op.name == "tile_attention") {
      core = true;
      CHECK(s.flops == B * h * N * N * (2 * dk + 5 + 2 * dk));
      CHECK(s.op.output == Dims{B, h, N, dk});
      CHECK(s.module == "attention");  // the core reads no parameter: the layer itself
    }
  CHECK(core);
  CHECK(r.unknown_steps == 0);
  CHECK(r.peak_bytes > 0);
  CHECK(r.time_cost.find("N") != std::string::npos);
}

TEST_CASE("explain prints every step with shapes, totals and the mha comparison") {
  Run r = explain({"mha(heads=2)", "--d-model", "16", "--seq", "8", "--batch", "3"});
  REQUIRE(r.status == 0);
  CHECK(r.out.find("declared cost: time") != std::string::npos);
  CHECK(r.out.find("matmul") != std::string::npos);
  CHECK(r.out.find("(3,8,16)") != std::string::npos);
  CHECK(r.out.find("tile_attention") != std::string::npos);
  CHECK(r.out.find("total:") != std::string::npos);
  CHECK(r.out.find("ratio to the fused mha: FLOPs 1.000") != std::string::npos);
  CHECK(r.out.find("baseline, the fused mha of the same size: mha(heads=2") != std::string::npos);
  // Steps are labelled by module: the q projection's matmul and bias add, the layer's core.
  CHECK(r.out.find("  attention.q_proj    matmul  ") != std::string::npos);
  CHECK(r.out.find("  attention.q_proj    add  ") != std::string::npos);
  CHECK(r.out.find("  attention           tile_attention  ") != std::string::npos);
  // The readable synthesizer path composes softmax on (B, h, N, N).
  Run s = explain({"synthesizer(parts=vanilla, heads=2, max_len=8)", "--d-model", "16", "--seq", "8", "--batch", "3"});
  REQUIRE(s.status == 0);
  CHECK(s.out.find("softmax") != std::string::npos);
  CHECK(s.out.find("(3,2,8,8)") != std::string::npos);
}

TEST_CASE("explain: local and linear cost fewer FLOPs than mha at large N") {
  const int64_t D = 32, N = 1024;
  auto mha = cli::explain_attention("mha(heads=2)", D, N, 1);
  auto local = cli::explain_attention("local(heads=2, window=16)", D, N, 1);
  auto linear = cli::explain_attention("linear(heads=2)", D, N, 1);
  CHECK(local.unknown_steps == 0);
  CHECK(linear.unknown_steps == 0);
  CHECK(local.flops < mha.flops / 4);
  CHECK(linear.flops < mha.flops / 4);
  // mha's FLOPs grow quadratically in N, local's linearly (memory does not tell them apart: mha
  // runs the fused kernel, which never holds the N x N matrix).
  auto mha_half = cli::explain_attention("mha(heads=2)", D, N / 2, 1);
  auto local_half = cli::explain_attention("local(heads=2, window=16)", D, N / 2, 1);
  CHECK(double(mha.flops) / double(mha_half.flops) > 3.0);
  CHECK(double(local.flops) / double(local_half.flops) < 2.1);
  CHECK(cli::dense_twin_spec(local.spec, D).rfind("mha(heads=2", 0) == 0);
}

TEST_CASE("explain labels a gate's ops by the gate module, through the parameter they read") {
  // The hard-concrete gate's parameter log_alpha: its sigmoid and stretch are gate ops.
  auto r = cli::explain_attention("mha(heads=2, gate=hard_concrete)", 16, 4, 1);
  bool sigmoid = false;
  for (const auto& s : r.steps)
    if (s.op.name == "sigmoid") {
      sigmoid = true;
      CHECK(s.module == "attention.gate");
    }
  CHECK(sigmoid);
}

TEST_CASE("explain: bad spec, sizes and options give clear errors") {
  Run bad = explain({"nosuch(heads=2)", "--d-model", "16", "--seq", "8"});
  CHECK(bad.status == 1);
  CHECK(bad.err.find("attnlab explain:") == 0);
  CHECK(bad.err.find("nosuch") != std::string::npos);
  Run zero = explain({"mha", "--d-model", "16", "--seq", "0"});
  CHECK(zero.status == 2);
  CHECK(zero.err.find("--seq: must be in [1") != std::string::npos);
  Run missing = explain({"mha"});
  CHECK(missing.status == 2);
  CHECK(missing.err.find("--d-model is required") != std::string::npos);
  Run nospec = explain({"--d-model", "16", "--seq", "8"});
  CHECK(nospec.status == 2);
  CHECK(nospec.err.find("SPEC is required") != std::string::npos);
  Run indivisible = explain({"mha(heads=3)", "--d-model", "16", "--seq", "8"});
  CHECK(indivisible.status == 1);
  CHECK(indivisible.err.find("heads") != std::string::npos);
  // A fused kernel without a FLOP formula (fnet's FFT) is shown as '?' and not turned into a ratio.
  Run fnet = explain({"fnet", "--d-model", "16", "--seq", "8"});
  CHECK(fnet.status == 0);
  CHECK(fnet.out.find("fourier_mix") != std::string::npos);
  CHECK(fnet.out.find("not counted") != std::string::npos);
  CHECK(fnet.out.find("FLOPs n/a") != std::string::npos);
  Run help = explain({"--help"});
  CHECK(help.status == 0);
  CHECK(help.out.find("Usage: attnlab explain") != std::string::npos);
}

TEST_CASE("explain --composed: mha's core as scale, scores, masked softmax and P V, each said in words") {
  const int64_t B = 1, N = 8, D = 8, h = 2, dk = 4;
  cli::ExplainOptions o;
  o.composed = true;
  o.causal = true;
  auto r = cli::explain_attention("mha(heads=2)", D, N, B, o);
  std::vector<std::string> core;  // the layer's own steps that compute
  for (const auto& s : r.steps) {
    CHECK(s.op.name != "tile_attention");
    CHECK_FALSE(s.does.empty());
    if (s.module == "attention" && (s.op.name == "matmul" || s.op.name == "softmax" || s.op.name == "mul"))
      core.push_back(s.op.name);
  }
  CHECK(core == std::vector<std::string>{"mul", "matmul", "softmax", "matmul", "mul"});
  int described = 0;
  for (const auto& s : r.steps) {
    if (s.module != "attention") continue;
    if (s.op.name == "mul" && s.op.inputs.size() == 1) described += s.does.find("1/sqrt(dk)") != std::string::npos;
    if (s.op.name == "matmul" && s.op.output == Dims{B, h, N, N}) described += s.does.find("Q K^T") != std::string::npos;
    if (s.op.name == "softmax") described += s.does.find("mask and softmax") == 0;  // causal: the mask
    if (s.op.name == "matmul" && s.op.output == Dims{B, h, N, dk}) described += s.does.find("P V") == 0;
  }
  CHECK(described == 4);
  // The composed path holds the (N, N) scores and probabilities the fused kernel never builds.
  auto fused = cli::explain_attention("mha(heads=2)", D, N, B);
  CHECK(r.peak_bytes > fused.peak_bytes);
  Run printed = explain({"mha(heads=2)", "--d-model", "16", "--seq", "8", "--composed"});
  REQUIRE(printed.status == 0);
  CHECK(printed.out.find("  does\n") != std::string::npos);
  CHECK(printed.out.find("composed path (need_weights)") != std::string::npos);
  CHECK(printed.out.find("softmax over the keys") != std::string::npos);
  CHECK(printed.out.find("P V: each query's weighted average") != std::string::npos);
}

TEST_CASE("explain --decode: one step against an L-token cache; GQA and MLA shrink the cache mha reads") {
  const int64_t D = 64, L = 64;
  cli::ExplainOptions o;
  o.decode = L;
  auto mha = cli::explain_attention("mha(heads=8)", D, 0, 1, o);
  auto gqa = cli::explain_attention("mha(heads=8, kv_heads=2)", D, 0, 1, o);
  auto mla = cli::explain_attention("mla(heads=8, kv_rank=16, rope_size=4)", D, 0, 1, o);
  auto ret = cli::explain_attention("retention(heads=8)", D, 0, 1, o);
  // Cache bytes: 2 h dk, 2 g dk and r + dr float32 numbers per position; retention a fixed state.
  CHECK(mha.cache_bytes == 2 * 8 * 8 * 4 * (L + 1));
  CHECK(gqa.cache_bytes == 2 * 2 * 8 * 4 * (L + 1));
  CHECK(mla.cache_bytes == (16 + 4) * 4 * (L + 1));
  CHECK(ret.cache_bytes == 8 * 8 * 8 * 4);
  CHECK(mha.cache_grows);
  CHECK(mla.cache_grows);
  CHECK_FALSE(ret.cache_grows);
  // The step is traced: one new position's projections, then scores against the L + 1 keys.
  bool scores = false;
  for (const auto& s : mha.steps)
    if (s.op.name == "matmul" && !s.op.output.empty() && s.op.output[s.op.output.size() - 1] == L + 1) {
      scores = true;
      CHECK(s.does.find("Q K^T") != std::string::npos);
    }
  CHECK(scores);
  CHECK(mha.unknown_steps == 0);
  CHECK(mha.flops > 2 * 8 * 8 * (L + 1));  // at least the scores' multiply-adds
  CHECK(mha.peak_bytes > 0);
  Run printed = explain({"mla(heads=8, kv_rank=16, rope_size=4)", "--d-model", "64", "--decode", "64"});
  REQUIRE(printed.status == 0);
  CHECK(printed.out.find("one decoding step: 1 new position against a cache of 64 positions") != std::string::npos);
  CHECK(printed.out.find("cache: 5,200 bytes for 65 positions (80 bytes per position)") != std::string::npos);
  CHECK(printed.out.find("cache bytes 0.156") != std::string::npos);  // 20 / 128 numbers per position
  Run noseq = explain({"mha", "--d-model", "16"});
  CHECK(noseq.status == 2);
  CHECK(noseq.err.find("--seq N is required") != std::string::npos);
  Run both = explain({"mha", "--d-model", "16", "--decode", "8", "--composed"});
  CHECK(both.status == 2);
  CHECK(both.err.find("--decode") != std::string::npos);
}

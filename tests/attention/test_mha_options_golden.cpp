// Golden tests of mha's options of current models (kv_heads, alibi, qk_norm, softcap, score,
// sinks, rope) against an independent PyTorch implementation written from the formulas
// (tests/reference/mha_options_reference.py, which also documents the file layout). Each layer
// is built from its spec string alone, loads the PyTorch weights strictly, and must reproduce
// output, attention and every gradient in float64, through the composed path (need_weights)
// and the fused one; the packed_* case through forward_packed with its segment ids.
#include <string>
#include <vector>

#include "golden.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Keep in sync with CASES in mha_options_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {
    "kv_heads_cross_mask", "alibi_causal_3_heads",    "qk_norm_rope_mask",      "rope_causal_pad",
    "softcap_mask",        "sigmoid_bias_mask",       "softpick_mask",          "softpick_causal_eps",
    "sinks_mask",          "all_softmax_causal_gate", "all_softmax_cross_mask", "all_sigmoid_causal",
    "all_softpick_mask",   "packed_all_softmax_causal_mask",
};

const GoldenFile& golden() { return reference_file("mha_options_golden.safetensors"); }

void run_case(const std::string& name) {
  GoldenCaseOptions opt;
  opt.also_without_weights = true;  // the fused path too
  run_golden_case(golden(), name, opt);
}

}  // namespace

TEST_CASE("mha options golden: kv_heads=2 of 4, cross-attention, a fully masked row") { run_case("kv_heads_cross_mask"); }
TEST_CASE("mha options golden: ALiBi with 3 heads (not a power of two), causal") { run_case("alibi_causal_3_heads"); }
TEST_CASE("mha options golden: qk_norm and RoPE (base 100), query mask") { run_case("qk_norm_rope_mask"); }
TEST_CASE("mha options golden: RoPE with key_size 6, causal, padding mask") { run_case("rope_causal_pad"); }
TEST_CASE("mha options golden: softcap 0.8, cross-attention, query mask") { run_case("softcap_mask"); }
TEST_CASE("mha options golden: sigmoid with bias 0.3, cross-attention, query mask") { run_case("sigmoid_bias_mask"); }
TEST_CASE("mha options golden: softpick, cross-attention, query mask") { run_case("softpick_mask"); }
TEST_CASE("mha options golden: softpick with eps 0.01, causal") { run_case("softpick_causal_eps"); }
TEST_CASE("mha options golden: sinks, cross-attention, query mask") { run_case("sinks_mask"); }
TEST_CASE("mha options golden: every softmax option with sinks, causal, padding mask, gates") {
  run_case("all_softmax_causal_gate");
}
TEST_CASE("mha options golden: every softmax option with sinks, multi-query, cross-attention") {
  run_case("all_softmax_cross_mask");
}
TEST_CASE("mha options golden: every option with sigmoid (default bias -log M), causal") { run_case("all_sigmoid_causal"); }
TEST_CASE("mha options golden: every option with softpick, bias=false, query mask") { run_case("all_softpick_mask"); }

TEST_CASE("mha options golden: packed sequences (segment ids) with every softmax option, causal, query mask") {
  run_case("packed_all_softmax_causal_mask");
}
TEST_CASE("mha options golden: the file and this test name the same cases") { check_golden_cases(golden(), kCases); }

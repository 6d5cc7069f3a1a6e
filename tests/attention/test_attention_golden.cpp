// Golden tests of the multi-head variants (mha, talking_heads, collaborative, synthesizer)
// against PyTorch modules written independently from docs/attention.md ("mha" to "collaborative").
//
// tests/reference/attention_reference.py builds each case's layer in PyTorch with attnlab's
// parameter and buffer names, gives it random weights, and writes the weights, inputs, output,
// probabilities and every gradient to tests/reference/attention_golden.safetensors (layout in
// the script). Here the layer comes from its spec string alone, loads the weights strictly (so
// any name or shape that differs from the documented one is a failure), and must reproduce the numbers
// in float64. The last test checks that this file and the golden file name the same cases.
#include <string>
#include <vector>

#include "golden.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Keep in sync with CASES in attention_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {
    "mha_cross_mask",          "mha_causal_gate",           "mha_no_key_bias",
    "talking_heads_mixed",     "talking_heads_no_pre",      "collaborative_random",
    "collaborative_causal_gate", "synthesizer_dense",       "synthesizer_random_vanilla",
    "synthesizer_factorized",
};

const GoldenFile& golden() { return reference_file("attention_golden.safetensors"); }

void run_case(const std::string& name) { run_golden_case(golden(), name); }

}  // namespace

TEST_CASE("attention golden: mha, cross-attention, key_size != value_size, a fully masked row") {
  run_case("mha_cross_mask");
}
TEST_CASE("attention golden: mha, causal, hard_concrete gate in eval mode, head_mask") { run_case("mha_causal_gate"); }
TEST_CASE("attention golden: mha, key_bias=false, padding mask") { run_case("mha_no_key_bias"); }
TEST_CASE("attention golden: talking_heads, hk=2, h=4, hv=3") { run_case("talking_heads_mixed"); }
TEST_CASE("attention golden: talking_heads, pre=false, cross-attention") { run_case("talking_heads_no_pre"); }
TEST_CASE("attention golden: collaborative, shared_key_size=6, cross-attention") { run_case("collaborative_random"); }
TEST_CASE("attention golden: collaborative, causal, gate clamped at 0") { run_case("collaborative_causal_gate"); }
TEST_CASE("attention golden: synthesizer, dense, default heads") { run_case("synthesizer_dense"); }
TEST_CASE("attention golden: synthesizer, random+vanilla mixture") { run_case("synthesizer_random_vanilla"); }
TEST_CASE("attention golden: synthesizer, factorized_dense+factorized_random+fixed_random, causal") {
  run_case("synthesizer_factorized");
  // The golden case sits at a*b = 9 >= max_len = 8; one fewer row must be refused.
  CHECK_THROWS_AS(nn::make_attention("synthesizer(parts=factorized_dense, max_len=8, heads=2, a=3, b=2)", 8),
                  ValueError);
}

TEST_CASE("attention golden: the file and this test name the same cases") {
  check_golden_cases(golden(), kCases);
}

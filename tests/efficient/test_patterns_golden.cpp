// Golden tests of the positional sparse patterns (local with and without sinks, sparse_strided, sparse_fixed, dilated)
// against an independent PyTorch implementation: dense scores, the documented allowed-rule as a
// boolean mask, masked softmax (tests/reference/patterns_reference.py, which also documents the
// file layout). Each layer is built from its spec string alone, loads the PyTorch weights
// strictly, and must reproduce output, densified attention and every gradient in float64.
#include <string>
#include <vector>

#include "golden.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Keep in sync with CASES in patterns_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {
    "local_cross_mask",    "local_causal_gate",   "local_sinks_causal_pad", "local_sinks_cross_mask",
    "strided_causal_pad",  "strided_cross",       "fixed_causal_gate",      "fixed_cross_no_bias",
    "dilated_mask",        "dilated_causal_pad",
};

const GoldenFile& golden() { return reference_file("patterns_golden.safetensors"); }

void run_case(const std::string& name) { run_golden_case(golden(), name); }

}  // namespace

TEST_CASE("patterns golden: local, cross-attention, key_size != value_size, a fully masked row") {
  run_case("local_cross_mask");
}
TEST_CASE("patterns golden: local, causal, hard_concrete gate in eval mode, head_mask") { run_case("local_causal_gate"); }
TEST_CASE("patterns golden: local with sink tokens, causal, padding mask") { run_case("local_sinks_causal_pad"); }
TEST_CASE("patterns golden: local with sink tokens, cross-attention on raw indices, a fully masked row") {
  run_case("local_sinks_cross_mask");
}
TEST_CASE("patterns golden: sparse_strided, default causal, padding mask") { run_case("strided_causal_pad"); }
TEST_CASE("patterns golden: sparse_strided, causal=false, cross-attention, a fully masked row") {
  run_case("strided_cross");
}
TEST_CASE("patterns golden: sparse_fixed, default causal, gates") { run_case("fixed_causal_gate"); }
TEST_CASE("patterns golden: sparse_fixed, cross-attention, bias=false") { run_case("fixed_cross_no_bias"); }
TEST_CASE("patterns golden: dilated, query-dependent mask") { run_case("dilated_mask"); }
TEST_CASE("patterns golden: dilated, causal, padding mask") { run_case("dilated_causal_pad"); }

TEST_CASE("patterns golden: the file and this test name the same cases") {
  check_golden_cases(golden(), kCases);
}

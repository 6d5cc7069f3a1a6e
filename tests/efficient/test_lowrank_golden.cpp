// Golden tests of sinkhorn, linformer, compressed and nystrom against PyTorch modules written
// independently from docs/attention.md (tests/reference/lowrank_reference.py, which
// writes tests/reference/lowrank_golden.safetensors; layout in the script). The layer comes
// from its spec string alone, loads the weights strictly (so any name or shape that differs
// from the documented one fails), and must reproduce the output, the attention where the variant has
// one (and return none where it has none), and every gradient, in float64.
#include <string>
#include <vector>

#include "golden.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Keep in sync with CASES in lowrank_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {
    "sinkhorn_mask",         "sinkhorn_gate_heads", "linformer_cross_mask", "linformer_share_gate",
    "compressed_cross_mask", "compressed_kv_heads", "nystrom_conv_mask",    "nystrom_cross_heads",
    "nystrom_even_conv",
};

const GoldenFile& golden() { return reference_file("lowrank_golden.safetensors"); }

// linformer and compressed have no N x M probabilities: their cases hold no attention.
const GoldenCaseOptions kOptions{.attention_optional = true};

void run_case(const std::string& name) { run_golden_case(golden(), name, kOptions); }

}  // namespace

TEST_CASE("lowrank golden: sinkhorn, padding mask with a fully masked example") { run_case("sinkhorn_mask"); }
TEST_CASE("lowrank golden: sinkhorn, per-head key mask, gate, key_size, iters and temperature") {
  run_case("sinkhorn_gate_heads");
}
TEST_CASE("lowrank golden: linformer, cross-attention, dk != dv, padding mask") { run_case("linformer_cross_mask"); }
TEST_CASE("lowrank golden: linformer, share=kv, gate clamped at 0") { run_case("linformer_share_gate"); }
TEST_CASE("lowrank golden: compressed, cross-attention, sparse key mask") { run_case("compressed_cross_mask"); }
TEST_CASE("lowrank golden: compressed, kv_heads=3 (a pruned layer's shape), bias=false") {
  run_case("compressed_kv_heads");
}
TEST_CASE("lowrank golden: nystrom, conv=3, padding mask") { run_case("nystrom_conv_mask"); }
TEST_CASE("lowrank golden: nystrom, cross-attention, per-head key mask, pinv_iters=4") {
  run_case("nystrom_cross_heads");
}
TEST_CASE("lowrank golden: nystrom, landmarks = N, even conv kernel, bias=false") { run_case("nystrom_even_conv"); }

TEST_CASE("lowrank golden: the file and this test name the same cases") {
  check_golden_cases(golden(), kCases);
}

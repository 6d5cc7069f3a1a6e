// Golden tests of the positional sparse patterns (local, sparse_strided, sparse_fixed, dilated)
// against an independent PyTorch implementation: dense scores, the spec's allowed-rule as a
// boolean mask, masked softmax (tests/reference/patterns_reference.py, which also documents the
// file layout). Each layer is built from its spec string alone, loads the PyTorch weights
// strictly, and must reproduce output, densified attention and every gradient in float64.
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/registry.hpp"

using namespace attnlab;
using namespace attnlab::testing;

namespace {

// Keep in sync with CASES in patterns_reference.py (the last test enforces it).
const std::vector<std::string> kCases = {
    "local_cross_mask",    "local_causal_gate",   "strided_causal_pad", "strided_cross",
    "fixed_causal_gate",   "fixed_cross_no_bias", "dilated_mask",       "dilated_causal_pad",
};

struct GoldenFile {
  TensorMap tensors;
  Metadata metadata;
};

const GoldenFile& golden() {
  static const GoldenFile file = [] {
    GoldenFile f;
    f.tensors = load_safetensors(ATTNLAB_REFERENCE_DIR "/patterns_golden.safetensors", &f.metadata);
    return f;
  }();
  return file;
}

// Same formulas on the same float64 inputs: only the order of roundings differs.
constexpr double kRtol = 1e-10, kAtol = 1e-12;

Tensor optional(const std::string& key) {
  auto it = golden().tensors.find(key);
  return it == golden().tensors.end() ? Tensor() : it->second;
}

const Tensor& required(const std::string& key) {
  auto it = golden().tensors.find(key);
  REQUIRE_MESSAGE(it != golden().tensors.end(), "missing in patterns_golden.safetensors: " << key);
  return it->second;
}

void check_close(const std::string& what, const Tensor& got, const Tensor& want) {
  REQUIRE_MESSAGE(got.defined(), what << ": attnlab gave no tensor");
  CHECK_MESSAGE(got.shape() == want.shape(),
                what << ": shape " << to_string(got.shape()) << " vs PyTorch's " << to_string(want.shape()));
  if (got.shape() != want.shape()) return;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (kAtol + kRtol * std::abs(w[i]));
    if (!(excess <= worst)) worst = excess, at = i;  // catches NaN too
  }
  CHECK_MESSAGE(worst <= 0, what << ": element " << at << " is " << g[at] << ", PyTorch gives " << w[at]);
}

void run_case(const std::string& name) {
  const Metadata& meta = golden().metadata;
  REQUIRE(meta.count(name + "/spec"));
  const std::string spec = meta.at(name + "/spec");
  const int64_t d_model = std::stoll(meta.at(name + "/d_model"));
  INFO(name << ": " << spec << ", d_model=" << d_model);

  auto layer = nn::make_attention(spec, d_model);
  layer->to(kFloat64);
  TensorMap weights;
  const std::string prefix = name + "/w/";
  for (const auto& [key, t] : golden().tensors)
    if (key.rfind(prefix, 0) == 0) weights[key.substr(prefix.size())] = t;
  REQUIRE_FALSE(weights.empty());
  layer->load_state_dict(weights);  // strict: names and shapes must be the spec's
  layer->eval();
  Tensor head_mask = layer->get_buffer("head_mask");
  head_mask.requires_grad_();  // Michel et al.'s head importance, compared like a parameter

  Tensor x = clone(required(name + "/x")).requires_grad_();
  Tensor context = optional(name + "/context");
  if (context.defined()) context = clone(context).requires_grad_();
  Tensor mask = optional(name + "/mask");
  auto result = layer->forward(x, context, mask, /*causal=*/false, /*need_weights=*/true);
  result.output.backward(required(name + "/grad_output"));

  check_close("output", result.output, required(name + "/output"));
  check_close("attention", result.attention, required(name + "/attention"));
  check_close("grad.x", x.grad(), required(name + "/grad.x"));
  if (context.defined()) check_close("grad.context", context.grad(), required(name + "/grad.context"));
  check_close("grad.head_mask", head_mask.grad(), required(name + "/grad.head_mask"));
  // Every parameter has a reference gradient, and every reference gradient a tensor here.
  std::set<std::string> expected_grads, compared = {"x", "head_mask"};
  if (context.defined()) compared.insert("context");
  const std::string grad_prefix = name + "/grad.";
  for (const auto& [key, t] : golden().tensors)
    if (key.rfind(grad_prefix, 0) == 0) expected_grads.insert(key.substr(grad_prefix.size()));
  for (const auto& [pname, p] : layer->named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : zeros_like(p);
    check_close("grad." + pname, g, required(grad_prefix + pname));
    compared.insert(pname);
  }
  CHECK(compared == expected_grads);
}

}  // namespace

TEST_CASE("patterns golden: local, cross-attention, key_size != value_size, a fully masked row") {
  run_case("local_cross_mask");
}
TEST_CASE("patterns golden: local, causal, hard_concrete gate in eval mode, head_mask") { run_case("local_causal_gate"); }
TEST_CASE("patterns golden: sparse_strided, default causal, padding mask") { run_case("strided_causal_pad"); }
TEST_CASE("patterns golden: sparse_strided, causal=false, cross-attention, a fully masked row") {
  run_case("strided_cross");
}
TEST_CASE("patterns golden: sparse_fixed, default causal, gates") { run_case("fixed_causal_gate"); }
TEST_CASE("patterns golden: sparse_fixed, cross-attention, bias=false") { run_case("fixed_cross_no_bias"); }
TEST_CASE("patterns golden: dilated, query-dependent mask") { run_case("dilated_mask"); }
TEST_CASE("patterns golden: dilated, causal, padding mask") { run_case("dilated_causal_pad"); }

TEST_CASE("patterns golden: the file and this test name the same cases") {
  std::set<std::string> in_file;
  for (const auto& [key, t] : golden().tensors) in_file.insert(key.substr(0, key.find('/')));
  std::set<std::string> in_file_meta;
  for (const auto& [key, v] : golden().metadata)
    if (key.size() > 5 && key.compare(key.size() - 5, 5, "/spec") == 0) in_file_meta.insert(key.substr(0, key.size() - 5));
  const std::set<std::string> here(kCases.begin(), kCases.end());
  CHECK(in_file == here);
  CHECK(in_file_meta == here);
}

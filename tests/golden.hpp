// The golden-file runner shared by every attention family's PyTorch comparison
// (tests/reference/*_reference.py write the files; their layout is documented there):
//   <case>/spec, <case>/d_model       metadata: the layer, built from its spec string alone
//   <case>/mode, <case>/causal        optional metadata: train|eval (default eval), true|false
//   <case>/w/<name>                   the state dict, loaded strictly (buffers included)
//   <case>/x, /context, /mask         inputs (context and mask optional)
//   <case>/grad_output                upstream gradient of the output
//   <case>/output, /attention         forward results (attention absent for variants without one)
//   <case>/grad.<name>                gradients of x, context, head_mask and every parameter
//   <case>/buffer.<name>              buffers after the forward (routing's updated centroids)
// One runner means every family compares the same things the same way; the options say only
// what really differs between families.
#pragma once
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing {

// Fails unless got has want's shape and |got - want| <= atol + rtol |want| everywhere; the
// message names the worst element. The defaults suit float64 runs of the same formulas, where
// only the order of roundings differs.
inline void check_close(const std::string& what, const Tensor& got, const Tensor& want, double rtol = 1e-10,
                        double atol = 1e-12) {
  REQUIRE_MESSAGE(got.defined(), what << ": attnlab gave no tensor");
  CHECK_MESSAGE(got.shape() == want.shape(),
                what << ": shape " << to_string(got.shape()) << " vs expected " << to_string(want.shape()));
  if (got.shape() != want.shape()) return;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(excess <= worst)) worst = excess, at = i;  // catches NaN too
  }
  CHECK_MESSAGE(worst <= 0, what << ": element " << at << " is " << g[at] << ", expected " << w[at]);
}

// One safetensors file written by a reference script, with its metadata.
struct GoldenFile {
  std::string path;
  TensorMap tensors;
  Metadata metadata;

  explicit GoldenFile(std::string p) : path(std::move(p)) { tensors = load_safetensors(path, &metadata); }

  Tensor optional(const std::string& key) const {
    auto it = tensors.find(key);
    return it == tensors.end() ? Tensor() : it->second;
  }
  const Tensor& required(const std::string& key) const {
    auto it = tensors.find(key);
    REQUIRE_MESSAGE(it != tensors.end(), "missing in " << path << ": " << key);
    return it->second;
  }
  // The tensors whose key starts with `prefix`, keyed by the rest of the key.
  TensorMap with_prefix(const std::string& prefix) const {
    TensorMap out;
    for (const auto& [key, t] : tensors)
      if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = t;
    return out;
  }
  // Case names, from the "<case>/spec" metadata.
  std::set<std::string> cases() const {
    std::set<std::string> out;
    for (const auto& [key, v] : metadata)
      if (key.size() > 5 && key.compare(key.size() - 5, 5, "/spec") == 0) out.insert(key.substr(0, key.size() - 5));
    return out;
  }
  // Case names, from the first component of every tensor key.
  std::set<std::string> tensor_cases() const {
    std::set<std::string> out;
    for (const auto& [key, t] : tensors) out.insert(key.substr(0, key.find('/')));
    return out;
  }
};

// tests/reference/<file_name>, loaded once per test binary.
inline const GoldenFile& reference_file(const std::string& file_name) {
  static std::map<std::string, GoldenFile> cache;
  auto it = cache.find(file_name);
  if (it == cache.end()) it = cache.emplace(file_name, GoldenFile(ATTNLAB_REFERENCE_DIR "/" + file_name)).first;
  return it->second;
}

// The test and the file must name the same cases (tensors and metadata alike), so that a case
// added on one side only is noticed.
// With a `prefix`, only the file's cases whose names start with it are compared (a file shared by
// two test files, each naming its own cases).
inline void check_golden_cases(const GoldenFile& file, const std::vector<std::string>& here,
                               const std::string& prefix = "") {
  const std::set<std::string> want(here.begin(), here.end());
  auto with_prefix = [&](const std::set<std::string>& names) {
    std::set<std::string> out;
    for (const std::string& n : names)
      if (n.rfind(prefix, 0) == 0) out.insert(n);
    return out;
  };
  CHECK(with_prefix(file.tensor_cases()) == want);
  CHECK(with_prefix(file.cases()) == want);
}

// What differs between families; the defaults are those of softmax attention.
struct GoldenCaseOptions {
  double rtol = 1e-10, atol = 1e-12;
  // Variants without probabilities (linformer, compressed, fnet, mixer) leave "attention" out
  // of the file and must return none; otherwise the file must hold it.
  bool attention_optional = false;
  // Layers without a head_mask buffer (fnet, mixer) compare no grad.head_mask.
  bool head_mask_optional = false;
  // Also run forward without need_weights and compare output and gradients again: for variants
  // whose fused path runs only then (longformer), so the file pins both paths.
  bool also_without_weights = false;
};

// Builds case `name`'s layer from its spec alone, loads the reference weights strictly (names,
// shapes and dtypes must be the documented ones), runs forward (forward_packed when the case
// holds segment_ids) with need_weights (and before that, when
// asked, without) and backward with the file's grad_output, then compares output, attention,
// the gradients of x, the context, head_mask and every parameter, and the buffers the file
// holds. The set of compared gradients must equal the file's, so neither side can hold one the
// other lacks.
inline void run_golden_case(const GoldenFile& file, const std::string& name, const GoldenCaseOptions& opt = {},
                            bool need_weights = true) {
  if (need_weights && opt.also_without_weights) run_golden_case(file, name, opt, false);
  const Metadata& meta = file.metadata;
  REQUIRE(meta.count(name + "/spec"));
  const std::string spec = meta.at(name + "/spec");
  const int64_t d_model = std::stoll(meta.at(name + "/d_model"));
  INFO(name << ": " << spec << ", d_model=" << d_model << ", need_weights=" << need_weights);
  auto meta_or = [&](const std::string& key, const std::string& fallback) {
    auto it = meta.find(name + "/" + key);
    return it == meta.end() ? fallback : it->second;
  };
  const std::string mode = meta_or("mode", "eval"), causal = meta_or("causal", "false");
  REQUIRE_MESSAGE((mode == "train" || mode == "eval"), name << "/mode is " << mode);
  REQUIRE_MESSAGE((causal == "true" || causal == "false"), name << "/causal is " << causal);

  auto layer = nn::make_attention(spec, d_model);
  layer->to(kFloat64);
  // Strict: every name, shape and dtype must be the documented ones and none may be missing, so an
  // empty set of weights passes only for a layer without state (fnet).
  REQUIRE_NOTHROW(layer->load_state_dict(file.with_prefix(name + "/w/")));
  layer->train(mode == "train");
  Tensor head_mask;  // Michel et al.'s head importance, compared like a parameter
  for (auto& [n, b] : layer->named_buffers())
    if (n == "head_mask") head_mask = b;
  if (!opt.head_mask_optional) REQUIRE_MESSAGE(head_mask.defined(), spec << " has no head_mask buffer");
  if (head_mask.defined()) head_mask.requires_grad_();

  Tensor x = clone(file.required(name + "/x")).requires_grad_();
  Tensor context = file.optional(name + "/context");
  if (context.defined()) context = clone(context).requires_grad_();
  Tensor mask = file.optional(name + "/mask");
  // Packed sequences: a case with segment_ids (B, N) runs forward_packed (self-attention).
  Tensor segment_ids = file.optional(name + "/segment_ids");
  REQUIRE_MESSAGE(!(segment_ids.defined() && context.defined()), name << ": segment_ids with a context");
  auto result = segment_ids.defined() ? layer->forward_packed(x, segment_ids, mask, causal == "true", need_weights)
                                      : layer->forward(x, context, mask, causal == "true", need_weights);
  result.output.backward(file.required(name + "/grad_output"));

  auto close = [&](const std::string& what, const Tensor& got, const Tensor& want) {
    check_close(what, got, want, opt.rtol, opt.atol);
  };
  close("output", result.output, file.required(name + "/output"));
  Tensor want_attention = opt.attention_optional ? file.optional(name + "/attention")
                                                 : file.required(name + "/attention");
  if (!need_weights)
    CHECK_MESSAGE(!result.attention.defined(), "no attention asked, none returned");
  else if (want_attention.defined())
    close("attention", result.attention, want_attention);
  else
    CHECK_MESSAGE(!result.attention.defined(), "this variant has no attention to return");

  const std::string grad = name + "/grad.";
  std::set<std::string> compared = {"x"};
  close("grad.x", x.grad(), file.required(grad + "x"));
  if (context.defined()) {
    close("grad.context", context.grad(), file.required(grad + "context"));
    compared.insert("context");
  }
  if (head_mask.defined()) {
    close("grad.head_mask", head_mask.grad(), file.required(grad + "head_mask"));
    compared.insert("head_mask");
  }
  for (const auto& [pname, p] : layer->named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : zeros_like(p);
    close("grad." + pname, g, file.required(grad + pname));
    compared.insert(pname);
  }
  std::set<std::string> expected;
  for (const auto& [key, t] : file.with_prefix(grad)) expected.insert(key);
  CHECK(compared == expected);

  for (const auto& [bname, want] : file.with_prefix(name + "/buffer."))
    close("buffer." + bname, layer->get_buffer(bname), want);
}

}  // namespace attnlab::testing

// Shared by test_longformer.cpp and test_bigbird.cpp: the dense-masked twin (the oracle: the
// spec's allowed rule written as a plain loop, then dense masked softmax attention with the
// layer's own weights), and the golden-file runner for tests/reference/blocks_golden.safetensors.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/bigbird.hpp"
#include "nn/attention/longformer.hpp"
#include "nn/attention/mha.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::blocks {

// allowed(b, i, n, m): the spec's rule for batch b, head i, query n, key m.
using Rule = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;

struct Dense {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, M)
};

inline Tensor linear(const nn::Linear& l, const Tensor& in) {
  Tensor y = matmul(in, transpose(l.weight, 0, 1));
  return l.bias.defined() ? y + l.bias : y;
}

// Dense twin of a ProjectedAttention layer. With `global_rows`, those query rows use
// q_global/k_global/v_global (longformer's separate_global) against every key the rule allows.
inline Dense dense_twin(const nn::ProjectedAttention& a, const Tensor& x, const Tensor& c, const Rule& rule,
                        const nn::Longformer* separate = nullptr) {
  const int64_t B = x.size(0), N = x.size(1), M = c.size(1), h = a.config.heads;
  const double scale = 1.0 / std::sqrt(double(a.config.key_size));
  std::vector<bool> allowed(B * h * N * M);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) allowed[((b * h + i) * N + n) * M + m] = rule(b, i, n, m);
  Tensor mask = from_vector(allowed, {B, h, N, M});
  auto attend = [&](const nn::Linear& lq, const nn::Linear& lk) {  // (B, h, N, M)
    Tensor q = nn::split_heads(linear(lq, x), h), k = nn::split_heads(linear(lk, c), h);
    return softmax(matmul(q, transpose(k, -2, -1)) * scale, -1, mask);
  };
  Tensor p = attend(*a.q_proj, *a.k_proj);
  Tensor o = matmul(p, nn::split_heads(linear(*a.v_proj, c), h));  // (B, h, N, dv)
  if (separate && separate->q_global) {
    std::vector<bool> row(N, false);
    for (int64_t g : separate->options.global) row[g] = g < N;
    if (!separate->options.global_list)
      for (int64_t g = 0; g < std::min(separate->options.global_first, N); ++g) row[g] = true;
    Tensor is_row = from_vector(row, {1, 1, N, 1});
    Tensor pg = attend(*separate->q_global, *separate->k_global);
    Tensor og = matmul(pg, nn::split_heads(linear(*separate->v_global, c), h));
    p = where(is_row, pg, p);
    o = where(is_row, og, o);
  }
  o = o * nn::head_scale(a.gate, a.head_mask);
  return {linear(*a.out_proj, nn::merge_heads(o)), p};
}

// Reads a bool mask broadcastable to (B, h, N, M) (undefined = all true), for rules.
inline std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask_reader(const Tensor& mask) {
  if (!mask.defined()) return [](int64_t, int64_t, int64_t, int64_t) { return true; };
  Tensor m4 = mask;
  while (m4.dim() < 4) m4 = unsqueeze(m4, 0);
  return [m4](int64_t b, int64_t i, int64_t n, int64_t m) {
    return m4.at({m4.size(0) == 1 ? 0 : b, m4.size(1) == 1 ? 0 : i, m4.size(2) == 1 ? 0 : n,
                  m4.size(3) == 1 ? 0 : m}) != 0;
  };
}

// The layer in float64, built after manual_seed(seed).
inline std::shared_ptr<nn::Attention> make64(const std::string& spec, int64_t d_model = 8, uint64_t seed = 7) {
  manual_seed(seed);
  auto a = nn::make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

// Random weights (not the defaults) so that every tensor moves the output; head_mask stays ones
// unless asked, and integer buffers (random_blocks) are left alone.
inline void randomize(nn::Attention& a, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  for (auto& [name, p] : a.named_parameters()) {
    Tensor t = p;
    copy_(t, randn(p.shape(), g, kFloat64, 0, 0.5));
  }
}

// Sum of |a - b| relative check to tolerance, with a message.
inline void check_close(const std::string& what, const Tensor& got, const Tensor& want, double rtol = 1e-10,
                        double atol = 1e-12) {
  REQUIRE_MESSAGE(got.defined(), what << ": no tensor");
  REQUIRE_MESSAGE(got.shape() == want.shape(),
                  what << ": shape " << to_string(got.shape()) << " vs " << to_string(want.shape()));
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(excess <= worst)) worst = excess, at = i;  // catches NaN too
  }
  CHECK_MESSAGE(worst <= 0, what << ": element " << at << " is " << g[at] << ", expected " << w[at]);
}

// ---- golden file (tests/reference/blocks_reference.py) ----

// Keep in sync with CASES in blocks_reference.py (test_bigbird.cpp checks it).
inline const std::vector<std::string> kGoldenCases = {
    "longformer_dilated_mask", "longformer_causal_separate_gate", "longformer_cross_separate",
    "longformer_blocks",       "bigbird_mask",                    "bigbird_cross",
};

struct GoldenFile {
  TensorMap tensors;
  Metadata metadata;
};

inline const GoldenFile& golden() {
  static const GoldenFile file = [] {
    GoldenFile f;
    f.tensors = load_safetensors(ATTNLAB_REFERENCE_DIR "/blocks_golden.safetensors", &f.metadata);
    return f;
  }();
  return file;
}

inline Tensor golden_optional(const std::string& key) {
  auto it = golden().tensors.find(key);
  return it == golden().tensors.end() ? Tensor() : it->second;
}

inline const Tensor& golden_required(const std::string& key) {
  auto it = golden().tensors.find(key);
  REQUIRE_MESSAGE(it != golden().tensors.end(), "missing in blocks_golden.safetensors: " << key);
  return it->second;
}

// Builds the case's layer from its spec alone, loads the reference weights strictly (names,
// shapes and dtypes must be the spec's, random_blocks included), and compares output,
// attention and every gradient with PyTorch's in float64.
inline void run_golden_case(const std::string& name) {
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
  layer->load_state_dict(weights);
  layer->eval();
  Tensor head_mask = layer->get_buffer("head_mask");
  head_mask.requires_grad_();

  Tensor x = clone(golden_required(name + "/x")).requires_grad_();
  Tensor context = golden_optional(name + "/context");
  if (context.defined()) context = clone(context).requires_grad_();
  Tensor mask = golden_optional(name + "/mask");
  auto result = layer->forward(x, context, mask, /*causal=*/false, /*need_weights=*/true);
  result.output.backward(golden_required(name + "/grad_output"));

  check_close("output", result.output, golden_required(name + "/output"));
  check_close("attention", result.attention, golden_required(name + "/attention"));
  check_close("grad.x", x.grad(), golden_required(name + "/grad.x"));
  if (context.defined()) check_close("grad.context", context.grad(), golden_required(name + "/grad.context"));
  check_close("grad.head_mask", head_mask.grad(), golden_required(name + "/grad.head_mask"));
  std::set<std::string> expected, compared = {"x", "head_mask"};
  if (context.defined()) compared.insert("context");
  const std::string grad_prefix = name + "/grad.";
  for (const auto& [key, t] : golden().tensors)
    if (key.rfind(grad_prefix, 0) == 0) expected.insert(key.substr(grad_prefix.size()));
  for (const auto& [pname, p] : layer->named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : zeros_like(p);
    check_close("grad." + pname, g, golden_required(grad_prefix + pname));
    compared.insert(pname);
  }
  CHECK(compared == expected);
}

}  // namespace attnlab::testing::blocks

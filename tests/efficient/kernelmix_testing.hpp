// Helpers shared by the tests of linear, performer, fnet and mixer: building float64 layers,
// gradchecking a whole layer, and the golden file written by
// tests/reference/kernelmix_reference.py (an independent PyTorch implementation).
#pragma once
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/attention/projected.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::kernelmix {

// A float64 layer from a spec, with weights from seed `seed`.
inline std::shared_ptr<nn::Attention> build64(const std::string& spec, int64_t d_model = 8, uint64_t seed = 7) {
  manual_seed(seed);
  auto a = nn::make_attention(spec, d_model);
  a->to(kFloat64);
  return a;
}

// gradcheck of the layer's output with respect to x, the context (when given) and every
// parameter, for a random upstream gradient.
inline GradcheckResult gradcheck_layer(nn::Attention& layer, const Tensor& x, const Tensor& context = {},
                                       const Tensor& mask = {}, bool causal = false) {
  std::vector<Tensor> inputs = {x.detach().requires_grad_()};
  if (context.defined()) inputs.push_back(context.detach().requires_grad_());
  for (auto& [name, p] : layer.named_parameters()) inputs.push_back(p);
  return gradcheck(
      [&](const std::vector<Tensor>& in) {
        return layer.forward(in[0], context.defined() ? in[1] : Tensor(), mask, causal).output;
      },
      inputs);
}

// Plain-loop linear layer y = x W^T + b on (T, in) row-major data.
inline std::vector<double> linear_rows(const std::vector<double>& x, int64_t rows, const Tensor& weight,
                                       const Tensor& bias) {
  const int64_t out = weight.size(0), in = weight.size(1);
  auto w = weight.to_vector<double>();
  std::vector<double> b = bias.defined() ? bias.to_vector<double>() : std::vector<double>(out, 0.0);
  std::vector<double> y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}

// ---- golden file ----

struct GoldenFile {
  TensorMap tensors;
  Metadata metadata;
};

inline const GoldenFile& golden() {
  static const GoldenFile file = [] {
    GoldenFile f;
    f.tensors = load_safetensors(ATTNLAB_REFERENCE_DIR "/kernelmix_golden.safetensors", &f.metadata);
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
  REQUIRE_MESSAGE(it != golden().tensors.end(), "missing in kernelmix_golden.safetensors: " << key);
  return it->second;
}

// Same formulas on the same float64 inputs: only the order of roundings differs.
inline void golden_close(const std::string& what, const Tensor& got, const Tensor& want, double rtol = 1e-10,
                         double atol = 1e-12) {
  REQUIRE_MESSAGE(got.defined(), what << ": attnlab gave no tensor");
  CHECK_MESSAGE(got.shape() == want.shape(),
                what << ": shape " << to_string(got.shape()) << " vs PyTorch's " << to_string(want.shape()));
  if (got.shape() != want.shape()) return;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(g[i] - w[i]) - (atol + rtol * std::abs(w[i]));
    if (!(excess <= worst)) worst = excess, at = i;  // catches NaN too
  }
  CHECK_MESSAGE(worst <= 0, what << ": element " << at << " is " << g[at] << ", PyTorch gives " << w[at]);
}

// Loads case `name`'s weights strictly into a layer built from its spec, runs it in eval mode
// (need_weights, causal from the spec), and compares output, attention (when the file has it)
// and the gradients of x, the context, head_mask (when the layer has one) and every parameter.
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
  layer->load_state_dict(weights);  // strict: names and shapes must be the spec's
  layer->eval();
  Tensor head_mask;
  for (auto& [n, b] : layer->named_buffers())
    if (n == "head_mask") head_mask = b;
  if (head_mask.defined()) head_mask.requires_grad_();

  Tensor x = clone(golden_required(name + "/x")).requires_grad_();
  Tensor context = golden_optional(name + "/context");
  if (context.defined()) context = clone(context).requires_grad_();
  Tensor mask = golden_optional(name + "/mask");
  auto result = layer->forward(x, context, mask, /*causal=*/false, /*need_weights=*/true);
  result.output.backward(golden_required(name + "/grad_output"));

  golden_close("output", result.output, golden_required(name + "/output"));
  Tensor want_attention = golden_optional(name + "/attention");
  if (want_attention.defined()) golden_close("attention", result.attention, want_attention);
  else CHECK_FALSE(result.attention.defined());
  golden_close("grad.x", x.grad(), golden_required(name + "/grad.x"));
  std::set<std::string> expected, compared = {"x"};
  if (context.defined()) {
    golden_close("grad.context", context.grad(), golden_required(name + "/grad.context"));
    compared.insert("context");
  }
  if (head_mask.defined()) {
    golden_close("grad.head_mask", head_mask.grad(), golden_required(name + "/grad.head_mask"));
    compared.insert("head_mask");
  }
  const std::string grad_prefix = name + "/grad.";
  for (const auto& [key, t] : golden().tensors)
    if (key.rfind(grad_prefix, 0) == 0) expected.insert(key.substr(grad_prefix.size()));
  for (const auto& [pname, p] : layer->named_parameters()) {
    Tensor g = p.grad().defined() ? p.grad() : zeros_like(p);
    golden_close("grad." + pname, g, golden_required(grad_prefix + pname));
    compared.insert(pname);
  }
  CHECK(compared == expected);
}

// The case names the golden file holds (from its "<case>/spec" metadata).
inline std::set<std::string> golden_cases() {
  std::set<std::string> out;
  for (const auto& [key, v] : golden().metadata)
    if (key.size() > 5 && key.compare(key.size() - 5, 5, "/spec") == 0) out.insert(key.substr(0, key.size() - 5));
  return out;
}

}  // namespace attnlab::testing::kernelmix

// ---- the plain-loop oracle of linear and performer ----

namespace attnlab::testing::kernelmix {

using Allowed = std::function<bool(int64_t b, int64_t head, int64_t n, int64_t m)>;
using FeatureMap = std::function<std::vector<double>(const std::vector<double>&)>;

struct OracleResult {
  Tensor output;     // (B, N, D)
  Tensor attention;  // (B, h, N, M)
};

// The spec's formula with plain loops over the layer's own weights (eval-mode gates):
//   A[n, m] = allowed(n, m) * phi(q_n) . phi(k_m),  O[n] = sum_m A[n, m] v_m / (sum_m A[n, m] + eps)
// and O[n] = 0 when no key is allowed; then gate * head_mask and out_proj.
inline OracleResult naive_kernelized(const nn::ProjectedAttention& layer, const Tensor& x, const Tensor& ctx,
                                     const Allowed& allowed, const FeatureMap& phi, double eps) {
  const int64_t B = x.size(0), N = x.size(1), M = ctx.size(1), D = x.size(2);
  const int64_t h = layer.config.heads, dk = layer.config.key_size, dv = layer.config.value_size;
  auto xs = x.to_vector<double>(), cs = ctx.to_vector<double>();
  auto q = linear_rows(xs, B * N, layer.q_proj->weight, layer.q_proj->bias);  // (B, N, h*dk)
  auto k = linear_rows(cs, B * M, layer.k_proj->weight, layer.k_proj->bias);  // (B, M, h*dk)
  auto v = linear_rows(cs, B * M, layer.v_proj->weight, layer.v_proj->bias);  // (B, M, h*dv)
  std::vector<double> scale = layer.head_mask.to_vector<double>();
  if (layer.gate) {
    auto la = layer.gate->log_alpha.to_vector<double>();
    const auto& gc = layer.gate->config;
    for (int64_t i = 0; i < h; ++i) {
      double g = 1.0 / (1.0 + std::exp(-la[i])) * (gc.zeta - gc.gamma) + gc.gamma;
      g = std::min(1.0, std::max(0.0, g));
      if (gc.hard) g = g > 0.5 ? 1.0 : 0.0;
      scale[i] *= g;
    }
  }
  std::vector<double> o(B * N * h * dv, 0.0), att(B * h * N * M, 0.0);
  auto slice = [](const std::vector<double>& t, int64_t row, int64_t width, int64_t head, int64_t d) {
    return std::vector<double>(t.begin() + row * width + head * d, t.begin() + row * width + (head + 1) * d);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t n = 0; n < N; ++n) {
        const std::vector<double> fq = phi(slice(q, b * N + n, h * dk, i, dk));
        std::vector<double> a(M, 0.0);
        double den = 0;
        bool any = false;
        for (int64_t m = 0; m < M; ++m) {
          if (!allowed(b, i, n, m)) continue;
          any = true;
          const std::vector<double> fk = phi(slice(k, b * M + m, h * dk, i, dk));
          for (size_t f = 0; f < fq.size(); ++f) a[m] += fq[f] * fk[f];
          den += a[m];
        }
        if (!any) continue;
        for (int64_t m = 0; m < M; ++m) {
          const double p = a[m] / (den + eps);
          att[((b * h + i) * N + n) * M + m] = p;
          for (int64_t d = 0; d < dv; ++d) o[(b * N + n) * h * dv + i * dv + d] += p * v[(b * M + m) * h * dv + i * dv + d] * scale[i];
        }
      }
  auto y = linear_rows(o, B * N, layer.out_proj->weight, layer.out_proj->bias);
  return {from_vector(y, {B, N, D}), from_vector(att, {B, h, N, M})};
}

}  // namespace attnlab::testing::kernelmix

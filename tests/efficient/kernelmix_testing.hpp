// Helpers shared by the tests of linear, performer, fnet and mixer: building float64 layers,
// gradchecking a whole layer, and the golden file written by
// tests/reference/kernelmix_reference.py (an independent PyTorch implementation).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "golden.hpp"
#include "efficient_testing.hpp"
#include "helpers.hpp"
#include "nn/attention/projected.hpp"
#include "nn/attention/registry.hpp"

namespace attnlab::testing::kernelmix {

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

// ---- golden file ----

inline const GoldenFile& golden() { return reference_file("kernelmix_golden.safetensors"); }

// fnet and mixer have neither probabilities nor a head_mask; linear and performer have both.
inline void run_golden_case(const std::string& name) {
  testing::run_golden_case(golden(), name, {.attention_optional = true, .head_mask_optional = true});
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

// The documented formula with plain loops over the layer's own weights (eval-mode gates):
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

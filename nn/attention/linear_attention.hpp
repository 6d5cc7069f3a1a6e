// `linear`: linear attention with the feature map phi(z) = elu(z) + 1 (Katharopoulos, Vyas,
// Pappas, Fleuret 2020, "Transformers are RNNs"; ATTENTION_SPEC.md section 2), and the kernelized
// core it shares with `performer`:
//
//   out[n] = sum_m (phi(q_n) . phi(k_m)) v_m / (sum_m phi(q_n) . phi(k_m) + eps)
//
// with the sums over the allowed keys (causal: m <= n). Non-causal, per (b, h):
// KV = phi(K)^T V (F x dv) and z = sum_m phi(k_m), so out = phi(Q) KV / (phi(Q) z + eps);
// causal: the chunked prefix scan of kernels/linear_scan.hpp. Neither forms an N x M matrix.
#pragma once
#include "nn/attention/projected.hpp"

namespace attnlab::nn {

// The kernelized attention of linear and performer on features that are already computed.
//   fq (B, h, N, F), fk (B, h, M, F): nonnegative features phi(q), phi(k)
//   v (B, h, M, dv)
//   eps: the denominator's eps, a 0-d tensor or broadcastable to (B, h, N, 1)
//   mask: bool, broadcastable to (B, h, N, M), or undefined; causal adds m <= n (M = N)
// Returns O (B, h, N, dv) and, with need_weights, the implicit normalised matrix (B, h, N, M)
// (dense: small inputs only). A key mask (constant along N) keeps the linear-cost path: masked
// keys get zero feature rows. A mask that varies along N cannot be summarised per key, so it
// falls back to the masked quadratic form, O(N M) time and memory. A query with no allowed key
// gets a zero output and a zero attention row, also with eps = 0.
struct KernelizedResult {
  Tensor output;     // (B, h, N, dv)
  Tensor attention;  // (B, h, N, M) when requested
};
KernelizedResult kernelized_attention(const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps,
                                      const Tensor& mask, bool causal, bool need_weights, const char* variant);

// "heads=.., key_size=.., value_size=.., bias=.., causal=.., attn_dropout=.." and the gate
// options when gated: the common part of the pinned spec string.
std::string head_spec(const HeadConfig& c);

class LinearAttention : public ProjectedAttention {
 public:
  LinearAttention(int64_t d_model, const HeadConfig& config, double eps);
  static VariantSchema schema();
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::string spec() const override;
  std::string type_name() const override { return "LinearAttention"; }

  // phi(z) = elu(z) + 1, elementwise.
  static Tensor feature_map(const Tensor& z);

  double eps;
};

}  // namespace attnlab::nn

/// @file
/// `linear`: linear attention with the feature map phi(z) = elu(z) + 1 (Katharopoulos, Vyas,
/// Pappas, Fleuret 2020, "Transformers are RNNs"; docs/attention.md, "linear"), and the kernelized
/// core it shares with `performer`:
///
///   out[n] = sum_m (phi(q_n) . phi(k_m)) v_m / (sum_m phi(q_n) . phi(k_m) + eps)
///
/// with the sums over the allowed keys (causal: m <= n). Non-causal, per (b, h):
/// KV = phi(K)^T V (F x dv) and z = sum_m phi(k_m), so out = phi(Q) KV / (phi(Q) z + eps);
/// causal: the chunked prefix scan of kernels/linear_scan.hpp. Neither forms an N x M matrix.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// What kernelized_attention returns.
struct KernelizedResult {
  Tensor output;     ///< (B, h, N, dv)
  Tensor attention;  ///< (B, h, N, M) when requested
};
/// The kernelized attention of linear and performer on features that are already computed.
///   fq (B, h, N, F), fk (B, h, M, F): nonnegative features phi(q), phi(k)
///   v (B, h, M, dv)
///   eps: the denominator's eps, a 0-d tensor or broadcastable to (B, h, N, 1)
///   mask: bool, broadcastable to (B, h, N, M), or undefined; causal adds m <= n (M = N)
/// Returns O (B, h, N, dv) and, with need_weights, the implicit normalised matrix (B, h, N, M)
/// (dense: small inputs only). A key mask (constant along N) keeps the linear-cost path: masked
/// keys get zero feature rows. A mask that varies along N cannot be summarised per key, so it
/// falls back to the masked quadratic form, O(N M) time and memory. A query with no allowed key
/// gets a zero output and a zero attention row, also with eps = 0.
KernelizedResult kernelized_attention(const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps,
                                      const Tensor& mask, bool causal, bool need_weights, const char* variant);

/// The recurrent state of causal kernelized attention, for forward_step (linear, performer):
/// per (b, h), S = sum_m phi(k_m) v_m^T and z = sum_m phi(k_m) kept together as the (F, dv + 1)
/// matrix sum_m phi(k_m) [v_m, 1]^T, so that one product gives numerator and denominator.
struct KernelizedCache : AttentionCache {
  int64_t batch = 0;  ///< B
  Tensor state;  ///< (B, h, F, dv + 1), zeros at first
  Tensor shift;  ///< performer: (B, h, 1, 1), the largest key exponent so far (-inf at first)
  int64_t numel() const override { return state.numel() + (shift.defined() ? shift.numel() : 0); }
};
/// One step on T new positions: fq, fk (B, h, T, F), v (B, h, T, dv), eps a 0-d tensor or
/// (B, h, T, 1). Adds the new keys to c.state and returns O (B, h, T, dv), the rows of the causal
/// kernelized_attention for these positions: (phi(q) S + within-step terms) / (phi(q) z + eps).
Tensor kernelized_step(KernelizedCache& c, const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& eps);

/// The `linear` variant: kernelized attention with phi(z) = elu(z) + 1, linear in N, with a recurrent state for decoding (see the file's description).
class LinearAttention : public ProjectedAttention {
 public:
  LinearAttention(int64_t d_model, const HeadConfig& config, double eps);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "LinearAttention"; }
  /// The recurrent state (KernelizedCache, F = dk): B h dk (dv + 1) numbers whatever the length.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  /// phi(z) = elu(z) + 1, elementwise.
  static Tensor feature_map(const Tensor& z);

  double eps;  ///< the denominator's eps
};

}  // namespace attnlab::nn
/// @}

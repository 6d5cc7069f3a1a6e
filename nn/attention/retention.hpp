/// @file
/// `retention`: multi-scale retention (Sun et al. 2023, "Retentive Network"; docs/attention.md,
/// "retention"). Causal by construction; each head i decays its past at its own rate gamma_i:
///
///   O_i[n] = sum_{m <= n} gamma_i^(n - m) (q_i[n] . k_i[m] / sqrt(dk)) v_i[m]
///   Y_i = g_i * head_mask_i * (O_i - mean(O_i)) / sqrt(var(O_i) + 1e-5)      (over dv, per row)
///   output = out_proj(swish(x g_proj^T + b_g) * concat_i Y_i)
///
/// O_i has three forms that agree (each a function below, tested against the others):
///   parallel:  O = ((Q K^T) * D) V with D[n, m] = gamma^(n - m) for m <= n, else 0; O(N^2) and the
///              one that returns the decayed scores (need_weights)
///   chunked:   blocks of `chunk` positions; inside a block the parallel form, across blocks the
///              state S = sum_{m < s} gamma^(s - 1 - m) k[m]^T v[m] (dk, dv), decayed by gamma^chunk
///              per block; O(N chunk) time, O(N) memory besides the states (forward without
///              need_weights)
///   recurrent: S <- gamma S + k[n]^T v[n], o[n] = q[n] S per position (forward_step)
/// Key masks zero the masked keys' rows of K, which removes them from all three forms.
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

namespace retention {

/// gamma_i^exponents[e] as (1, h, E, 1), in `dtype`: a per-row decay to multiply (B, h, E, d) by.
Tensor decay_powers(const std::vector<double>& gammas, const std::vector<double>& exponents, DType dtype);
/// D (1, h, L, L): gamma_i^(t - u) for u <= t, 0 above the diagonal.
Tensor decay_matrix(const std::vector<double>& gammas, int64_t length, DType dtype);

/// q (B, h, N, dk) already scaled by 1/sqrt(dk), k (B, h, N, dk), v (B, h, N, dv) -> O (B, h, N, dv).
/// Differentiable. `scores`, when given, receives the decayed score matrix (Q K^T) * D (B, h, N, N).
Tensor parallel(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas,
                Tensor* scores = nullptr);
/// The same O by blocks of `chunk` positions (the last block may be shorter). Differentiable.
Tensor chunked(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas, int64_t chunk);
/// The same O one position at a time from `state` (B, h, dk, dv), which it advances past the T
/// positions of q, k, v (B, h, T, .). No autograd (decoding).
Tensor recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<double>& gammas, Tensor& state);

}  // namespace retention

/// The recurrent decoding state: S_i (dk, dv) per head and sequence, whatever the length.
struct RetentionCache : AttentionCache {
  Tensor state;  ///< (B, h, dk, dv)
  int64_t numel() const override { return state.numel(); }
};

/// The `retention` variant: multi-scale retention, causal, with a decaying recurrent state (see the file's description).
class Retention : public Attention {
 public:
  /// gammas: one decay rate per head, in (0, 1).
  Retention(int64_t d_model, const HeadConfig& config, std::vector<double> gammas, int64_t chunk);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)
  /// gamma_i = 1 - 2^(-5 - i), the paper's default.
  static std::vector<double> default_decays(int64_t heads);

  /// Causal whatever `causal` says; a context is an error, and so is a mask that is not a key mask.
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  /// Packed sequences: rejected, it takes key masks only (constant along N), and a segment mask varies along N.
  AttentionResult forward_segments(const Tensor&, const Tensor&, const Tensor&, bool, bool) override {
    reject_segment_ids("retention", "it takes key masks only (constant along N), and a segment mask varies along N");
  }
  std::string type_name() const override { return "Retention"; }
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  HeadConfig config;  ///< the options the layer was built from
  std::vector<double> gammas;                                        ///< (h) decay rates
  int64_t chunk;                                                     ///< block size of the chunked form
  std::shared_ptr<Linear> q_proj;    ///< (h*dk, D)
  std::shared_ptr<Linear> k_proj;    ///< (h*dk, D)
  std::shared_ptr<Linear> v_proj;    ///< (h*dv, D)
  std::shared_ptr<Linear> g_proj;    ///< (h*dv, D)
  std::shared_ptr<Linear> out_proj;  ///< (D, h*dv)
  std::shared_ptr<HardConcreteGate> gate;                            ///< null unless gate=hard_concrete
  Tensor head_mask;                                                  ///< (h) buffer, ones

 private:
  /// O (B, h, T, dv) of the positions x (B, T, D) -> the layer output (B, T, D).
  Tensor finish(const Tensor& x, const Tensor& o) const;
};

}  // namespace attnlab::nn
/// @}

/// @file
/// `performer`: FAVOR+ positive random features for softmax attention (Choromanski et al. 2021,
/// "Rethinking Attention with Performers"; docs/attention.md, "performer").
///
///   q' = q / dk^(1/4),  k' = k / dk^(1/4)
///   phi(z) = exp(W z - ||z||^2 / 2) / sqrt(m)          W = projection (m, dk), shared by heads
///   out[n] = sum_m (phi(q'_n) . phi(k'_m)) v_m / (sum_m phi(q'_n) . phi(k'_m) + eps)
///
/// computed like `linear` (kernelized_attention: phi(K)^T V, or the causal prefix scan), so
/// E[phi(q') . phi(k')] = exp(q . k / sqrt(dk)) and the output approximates softmax attention.
///
/// Projection: with ortho, rows come in blocks of dk orthonormal vectors (the transposed Q of a
/// sign-corrected QR of a dk x dk Gaussian matrix, Q * diag(sign(diag R))), the last block cut to
/// m mod dk rows; row i is then rescaled to the norm of row i of a fresh (m, dk) Gaussian matrix.
/// Without ortho it is an (m, dk) Gaussian matrix. Draw order from the layer's generator `gen`:
/// the ceil(m/dk) blocks (row-major dk x dk each), then the (m, dk) norm matrix.
///
/// Stability: each query row is shifted by its largest exponent a_n and the keys of a (b, h) by
/// their largest allowed exponent c before exp. The shifts cancel between numerator and
/// denominator; eps is rescaled to eps * exp(-(a_n + c)) so that the result is the unshifted
/// formula with eps on the unshifted denominator, as docs/attention.md defines it.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `performer` beside the head options (see the file's description).
struct PerformerConfig {
  int64_t features = 256;  ///< m
  bool ortho = true;       ///< orthogonal blocks of random features
  int64_t redraw = 0;  ///< T: redraw every T train-mode forward calls (0 = never)
  double eps = 1e-6;       ///< added to the denominator
};

/// The `performer` variant: FAVOR+ positive random features approximating softmax attention (see the file's description).
class Performer : public ProjectedAttention {
 public:
  Performer(int64_t d_model, const HeadConfig& config, const PerformerConfig& performer);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "Performer"; }
  /// The recurrent state (KernelizedCache, F = m) with the running key shift: B h (m (dv + 1) + 1)
  /// numbers whatever the length. When new keys raise the largest key exponent c to c', the
  /// state is multiplied by exp(c - c'), so it always holds the features shifted by the current
  /// c: exactly forward's result in real arithmetic (forward shifts by the largest exponent of
  /// all N keys instead; the two differ by float rounding only).
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  /// A new (m, dk) float64 projection drawn from `gen` as described above.
  static Tensor draw_projection(int64_t m, int64_t dk, bool ortho, Generator& gen);
  /// Replaces the projection buffer's values with a fresh draw from `gen` (keeping its dtype).
  /// Graphs built before keep the old values: forward works on a snapshot.
  void redraw_projection();

  PerformerConfig performer;  ///< the options the layer was built from
  Tensor projection;        ///< (m, dk) buffer
  int64_t train_calls = 0;  ///< train-mode forward calls since the last draw

 private:
  /// W z' - ||z'||^2 / 2 with z' = z / dk^(1/4): z (B, h, N, dk), w (m, dk) -> (B, h, N, m).
  Tensor exponent(const Tensor& z, const Tensor& w) const;
};

}  // namespace attnlab::nn
/// @}

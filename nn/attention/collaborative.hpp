/// @file
/// `collaborative`: collaborative multi-head attention (Cordonnier, Loukas, Jaggi 2020,
/// "Multi-Head Attention: Collaborate Instead of Concatenate"; docs/attention.md, "collaborative").
/// All heads share one query and one key projection of width Dk~; head i re-weights the Dk~ shared
/// dimensions by its row of `mixing` and adds a content bias on the keys:
///
///   q~ = x q_shared^T (B, N, Dk~);  k~ = c k_shared^T (B, M, Dk~)
///   Score_i[n, m] = scale * ( sum_r q~[n, r] mixing[i, r] k~[m, r] + content_bias[i] . c[m] )
///   P_i = softmax_m(Score_i masked);  O_i = P_i V_i
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))
///
/// Also here: `to_collaborative`, which turns a trained `mha` layer into a collaborative one by a
/// CP decomposition of its stacked per-head bilinear forms (cp_decomposition.hpp).
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/attention/cp_decomposition.hpp"
#include "nn/attention/mha.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The options of `collaborative` beside the head options (see the file's description).
struct CollaborativeConfig {
  HeadConfig head;                     ///< key_size is unused: the keys are shared, Dk~ wide
  int64_t shared_key_size = 0;         ///< Dk~
  std::string mixing_init = "random";  ///< concatenate | ones | random (normal(0, 0.2))
  double scale = 0;                    ///< resolved; the option defaults to 1/sqrt(Dk~/h)
};

/// The `collaborative` variant: heads share one key/query projection and mix it per head (see the file's description).
class CollaborativeAttention : public Attention {
 public:
  CollaborativeAttention(int64_t d_model, const CollaborativeConfig& config);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  /// Slices mixing, content_bias, v_proj, out_proj, head_mask and the gate; the shared
  /// projections are kept whole.
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  std::string spec() const override;
  std::string type_name() const override { return "CollaborativeAttention"; }
  /// Caches per position the shared key k~ (Dk~ numbers, shared by the heads), the scaled
  /// content-bias term of every head and V: B max_len (Dk~ + h + h dv) numbers.
  std::unique_ptr<AttentionCache> make_cache(int64_t batch, int64_t max_len) const override;
  Tensor forward_step(const Tensor& x_new, AttentionCache& cache) override;

  CollaborativeConfig config;  ///< the options the layer was built from
  Tensor mixing;                               ///< (h, Dk~)
  std::shared_ptr<Linear> q_shared;      ///< weight (Dk~, D), no bias
  std::shared_ptr<Linear> k_shared;      ///< weight (Dk~, D), no bias
  std::shared_ptr<Linear> content_bias;        ///< weight (h, D), no bias
  std::shared_ptr<Linear> v_proj;        ///< as in mha
  std::shared_ptr<Linear> out_proj;      ///< as in mha
  std::shared_ptr<HardConcreteGate> gate;      ///< null unless gate=hard_concrete
  Tensor head_mask;                            ///< (h) buffer, ones
  Generator gen;                               ///< attention dropout
};

/// Converts a trained `mha` layer (same D, h, dv) into a collaborative layer with shared key
/// size Dk~ (docs/attention.md, "to_collaborative"):
///  - T[a, i, b] = sum_c Wq_i[c, a] Wk_i[c, b] (D, h, D) is fitted by a rank-Dk~ CP
///    decomposition T ~= sum_r A[a, r] M[i, r] Bk[b, r] (cp_als with `options`);
///    q_shared.weight = A^T, mixing = M, k_shared.weight = Bk^T. With Dk~ = h*dk the
///    concatenate layout is used instead, which is exact (error 0, 0 iterations).
///  - content_bias.weight[i] = q_proj.bias_i^T Wk_i; the key bias is dropped (it adds a
///    per-query constant to every score row, which softmax removes).
///  - v_proj, out_proj, gate.log_alpha, head_mask, causal, attn_dropout and the train/eval
///    mode are copied; the scale stays 1/sqrt(dk), so the outputs match up to the CP error.
/// The fit's relative error and sweep count go to `report` when given.
std::shared_ptr<CollaborativeAttention> to_collaborative(const MultiHeadAttention& mha, int64_t shared_key_size,
                                                         CPOptions options = {}, CPReport* report = nullptr);

}  // namespace attnlab::nn
/// @}

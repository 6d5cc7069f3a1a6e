/// @file
/// The base of the variants that use the standard MHA projections (docs/attention.md, "Conventions
/// shared by every variant", "MHA projections"): most of the efficient family. A subclass computes
/// the head outputs O (B, h, N, dv) from q, k, v its own way; this class owns everything around
/// that:
///
///   q = split(q_proj(x)), k = split(k_proj(c)), v = split(v_proj(c))     (project)
///   output = out_proj(concat_i(g_i * head_mask_i * O_i))                  (finish)
///
/// plus the Hard Concrete gates, the head_mask buffer and prune_heads.
/// @ingroup attention
#pragma once
#include "nn/attention/attention.hpp"
#include "nn/linear.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The base of the variants on the standard MHA projections (see the file's description).
class ProjectedAttention : public Attention {
 public:
  /// `has_k_proj` = false for shared-QK variants (lsh): no k_proj, project() returns k undefined.
  ProjectedAttention(std::string variant, int64_t d_model, const HeadConfig& config, bool has_k_proj = true);

  /// Generic head pruning: builds the same spec with heads = keep.size() through the registry,
  /// then copies the kept heads' slices (head_slices()), head_mask, the gates and every other
  /// tensor through prune_tensor() (copy_pruned_state).
  std::shared_ptr<Attention> prune_heads(const std::vector<int64_t>& keep) const override;
  /// format_spec of the registered schema of variant() with the head options and own_options().
  std::string spec() const override;
  const std::string& variant() const { return variant_; }  ///< the registry name

  HeadConfig config;  ///< the options the layer was built from
  std::shared_ptr<Linear> q_proj;    ///< (h*dk, D)
  std::shared_ptr<Linear> k_proj;    ///< (h*dk, D); null without has_k_proj
  std::shared_ptr<Linear> v_proj;    ///< (h*dv, D)
  std::shared_ptr<Linear> out_proj;  ///< (D, h*dv)
  std::shared_ptr<HardConcreteGate> gate;                    ///< null unless gate=hard_concrete
  Tensor head_mask;                                          ///< (h) buffer, ones
  Generator gen;                                             ///< attention dropout, seeded draws

 protected:
  /// The projected heads a subclass attends with.
  struct Heads {
    Tensor q;  ///< (B, h, N, dk), not scaled
    Tensor k;  ///< (B, h, M, dk), undefined without k_proj
    Tensor v;  ///< (B, h, M, dv)
  };
  /// The variant's own resolved options (those beside the head options), for spec().
  virtual void own_options(OptionValues& values) const;
  /// spec() with heads = h: the spec of prune_heads' smaller layer.
  std::string spec_with_heads(int64_t h) const;
  /// x (B, N, D), c (B, M, D) (c = x for self-attention).
  Heads project(const Tensor& x, const Tensor& c);
  /// o (B, h, N, dv) -> (B, N, D): the per-head gate and head_mask, then out_proj.
  Tensor finish(const Tensor& o);
  /// The per-head slices prune_heads takes: q_proj/k_proj rows (dk per head), v_proj rows and
  /// out_proj.weight columns (dv per head).
  virtual std::vector<HeadSlice> head_slices() const;
  /// The value prune_heads gives the variant's own tensor `name` (not a head slice, head_mask or
  /// gate) in the smaller layer. Default: `from` whole when the smaller layer's tensor `to` has
  /// its shape (tensors shared by the heads); head rows (dim 0) when dim 0 is the head count;
  /// otherwise an error. A variant with per-head tensors must override this for them: a `keep`
  /// that lists every head in another order leaves their shape unchanged, and only the variant
  /// knows that they are per head (lsh, routing and bigbird do, and test a reordering keep).
  virtual Tensor prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                              const std::vector<int64_t>& keep) const;

 private:
  std::string variant_;
};

}  // namespace attnlab::nn
/// @}

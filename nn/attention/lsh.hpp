/// @file
/// `lsh`: locality-sensitive-hashing attention (Kitaev, Kaiser, Levskaya 2020, "Reformer: The
/// Efficient Transformer"; docs/attention.md, "lsh"). Shared QK: there is no k_proj; the keys
/// are the normalised queries k^[m] = q[m]/||q[m]||.
///
///   round t (of R): y = k^ . rotations[i, :, t, :];  bucket = argmax([y, -y])       (nb buckets)
///   sort positions by (bucket, position), cut into chunks of c; a query attends the keys of its
///   chunk and of the previous chunk (chunk 0 looks back at the last one);
///   score q[n].k^[m]/sqrt(dk), own position -1e5 instead; causal/padding by original positions
///   o = sum_t softmax_t(lse_t) o_t  (= one softmax over every round's keys of the query)
///   output = out_proj(concat_i(g_i * head_mask_i * o_i))
///
/// The fast path never forms an N x N matrix: it gathers q, k^ and v into sorted order and does
/// one batched matmul over (B, h, R, N/c) chunks against 2c keys each.
/// @ingroup attention
#pragma once
#include "nn/attention/projected.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// Helpers shared with `routing` (routing.cpp), in their own namespace.
namespace cluster {

/// Reads the user's mask (broadcastable to (B, h, N, N)) element by element through its strides,
/// so that a key mask is never expanded into an N x N copy. Undefined = everything allowed. The
/// mask must outlive this reader.
class MaskElements {
 public:
  MaskElements(const Tensor& mask, int64_t B, int64_t h, int64_t N, const char* variant);  ///< checks `mask` against (B, h, N, N), naming `variant`
  /// Whether query n of head i in batch row b may attend key m.
  bool operator()(int64_t b, int64_t i, int64_t n, int64_t m) const {
    return !data_ || data_[b * sb_ + i * sh_ + n * sn_ + m * sm_];
  }

 private:
  const bool* data_ = nullptr;
  int64_t sb_ = 0, sh_ = 0, sn_ = 0, sm_ = 0;
};
/// v / max(||v||, 1e-12) along the last dim (F.normalize), differentiable, finite at v = 0.
Tensor unit_rows(const Tensor& v);

}  // namespace cluster

/// The `lsh` variant: Reformer's locality-sensitive-hashing attention with shared queries and keys (see the file's description).
class LshAttention : public ProjectedAttention {
 public:
  /// buckets nb (even), hashes R, chunk c.
  LshAttention(int64_t d_model, const HeadConfig& config, int64_t buckets, int64_t hashes, int64_t chunk);  ///< a layer of width d_model with these options, as make() builds it from a spec
  static VariantSchema schema();  ///< the variant's options, defaults and costs
  static std::shared_ptr<Attention> make(const Options& options, int64_t d_model);  ///< the layer a parsed spec asks for (the registry's factory)

  /// Self-attention only (a context is an error); N must be a multiple of chunk.
  AttentionResult forward(const Tensor& x, const Tensor& context = {}, const Tensor& mask = {}, bool causal = false,
                          bool need_weights = false) override;
  void own_options(OptionValues& values) const override;
  std::string type_name() const override { return "LshAttention"; }

  /// The bucket of every position in every round for input x (B, N, D): (B, h, R, N) int64.
  Tensor hash(const Tensor& x);
  /// The same from the per-head queries q (B, h, N, dk) (normalised inside).
  Tensor hash_queries(const Tensor& q) const;

  int64_t buckets;  ///< hash buckets per round
  int64_t hashes;   ///< hashing rounds
  int64_t chunk;    ///< the sorted sequence is attended in chunks of this size
  Tensor rotations;  ///< (h, dk, R, nb/2) buffer, N(0, 1) at init

 protected:
  Tensor prune_tensor(const std::string& name, const Tensor& from, const Tensor& to,
                      const std::vector<int64_t>& keep) const override;
};

}  // namespace attnlab::nn
/// @}

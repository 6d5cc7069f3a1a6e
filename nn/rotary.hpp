/// @file
/// nn::RotaryEmbedding: rotary position embedding (RoPE; Su et al. 2021, "RoFormer"). Each
/// query/key vector of size dim is split into dim/2 pairs and pair i at position m is rotated by
/// the angle m * theta_i, theta_i = base^(-2i/dim), so that q_m . k_n depends only on m - n.
///
/// Pairing convention: the "rotate_half" form of GPT-NeoX and HuggingFace LLaMA, where pair i is
/// (x[i], x[i + dim/2]) — NOT the interleaved (x[2i], x[2i+1]) of the RoFormer paper and Meta's
/// original LLaMA code. With c = cos(m theta), s = sin(m theta) tables laid out as
/// cat(freqs, freqs):
///   rope(x) = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[dim/2:], x[:dim/2]).
/// Weights trained with one convention need their q/k projections permuted to use the other.
///
/// Buffers (non-persistent, recomputed, never saved): cos, sin (max_len, dim).
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Rotary position embedding (RoPE, Su et al. 2021) with precomputed cos and sin tables.
class RotaryEmbedding : public Module {
 public:
  /// dim (the per-head size) must be even.
  explicit RotaryEmbedding(int64_t dim, int64_t max_len = 2048, double base = 10000.0);
  /// x (B, h, N, dim) (any leading dims) -> rotated, same shape; position of x[..., j, :] is
  /// offset + j. offset + N > max_len is an IndexError.
  Tensor apply(const Tensor& x, int64_t offset = 0) const;
  std::string type_name() const override { return "RotaryEmbedding"; }
  std::string extra_repr() const override;

  int64_t dim;      ///< the per-head size rotated (even)
  int64_t max_len;  ///< rows of the tables
  double base;      ///< the angle base, 10000 in RoFormer
  Tensor cos;       ///< (max_len, dim), non-persistent buffer
  Tensor sin;       ///< (max_len, dim), non-persistent buffer
};

/// cat(-x2, x1) for x = cat(x1, x2) split in halves along the last dim.
Tensor rotate_half(const Tensor& x);

/// RoPE without a table module: x (..., N, dim), dim even, rotated at positions offset .. offset
/// + N - 1 with base `base`; the angles are computed in double for these positions only (O(N dim)),
/// so any position is allowed and float64 inputs get float64 tables.
Tensor rope_rotate(const Tensor& x, int64_t offset, double base = 10000.0);

}  // namespace attnlab::nn
/// @}

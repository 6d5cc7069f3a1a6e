/// @file
/// Absolute positional encodings added to a sequence of embeddings x (B, N, D) (or (N, D)):
///   LearnedPositionalEmbedding: a trained table (GPT-2's wpe), parameter weight (max_len, dim),
///     initialised N(0, 0.02^2) as in GPT-2 / nanoGPT.
///   SinusoidalPositionalEncoding: the fixed table of Vaswani et al. 2017, sec. 3.5,
///     pe[pos, 2i] = sin(pos / 10000^(2i/dim)), pe[pos, 2i+1] = cos(pos / 10000^(2i/dim)), kept
///     as a non-persistent buffer `pe` (max_len, dim): it is recomputed, never saved.
/// Both take an optional position offset (the index of x's first position, for decoding with
/// a cache); offset + N > max_len is an IndexError.
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// Learned absolute positions: a (max_len, dim) table added to the input.
class LearnedPositionalEmbedding : public UnaryModule {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim);  ///< weight (max_len, dim) drawn like PyTorch's nn.Embedding
  void reset_parameters(Generator& gen = default_generator());  ///< Redraws the table with `gen`.
  /// x (..., N, dim) -> x + weight[offset : offset + N]
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  Tensor forward(const Tensor& x, int64_t offset);  ///< x + the rows of positions offset .. offset + N - 1; IndexError past max_len
  std::string type_name() const override { return "LearnedPositionalEmbedding"; }
  std::string extra_repr() const override;

  int64_t max_len;  ///< positions offset + N must not exceed it
  int64_t dim;      ///< the width of x
  Tensor weight;  ///< (max_len, dim)
};

/// Fixed sinusoidal positions (Vaswani et al. 2017), a (max_len, dim) table added to the input.
class SinusoidalPositionalEncoding : public UnaryModule {
 public:
  /// dim must be even.
  SinusoidalPositionalEncoding(int64_t max_len, int64_t dim);
  /// x (..., N, dim) -> x + pe[offset : offset + N]
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  Tensor forward(const Tensor& x, int64_t offset);  ///< x + the rows of positions offset .. offset + N - 1; IndexError past max_len
  std::string type_name() const override { return "SinusoidalPositionalEncoding"; }
  std::string extra_repr() const override;

  int64_t max_len;  ///< positions offset + N must not exceed it
  int64_t dim;      ///< the width of x (even)
  Tensor pe;  ///< (max_len, dim), non-persistent buffer
};

}  // namespace attnlab::nn
/// @}

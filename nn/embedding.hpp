/// @file
/// nn::Embedding: a lookup table of num_embeddings rows of size embedding_dim
/// (torch.nn.Embedding). Parameter: weight (num_embeddings, embedding_dim), drawn from N(0, 1)
/// like PyTorch's. forward takes int64 indices of any shape.
/// @ingroup nn
#pragma once
#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// A lookup table (nn.Embedding): row i of weight for token id i.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);  ///< weight (V, D) drawn from N(0, 1), as PyTorch does; ValueError for a size <= 0
  void reset_parameters(Generator& gen = default_generator());  ///< Redraws weight from N(0, 1) with `gen`.
  /// indices int64 (...) -> (..., embedding_dim)
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings;  ///< V, the number of rows
  int64_t embedding_dim;   ///< D, the width of a row
  Tensor weight;  ///< (V, D)
};

}  // namespace attnlab::nn
/// @}

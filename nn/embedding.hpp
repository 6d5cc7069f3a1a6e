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

class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  void reset_parameters(Generator& gen = default_generator());
  /// indices int64 (...) -> (..., embedding_dim)
  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;  ///< (V, D)
};

}  // namespace attnlab::nn
/// @}

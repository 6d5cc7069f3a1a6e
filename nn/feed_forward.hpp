/// @file
/// nn::FeedForward: the position-wise MLP of a transformer block (Vaswani et al. 2017, sec. 3.3),
/// fc2(dropout(act(fc1(x)))), the order of torch.nn.TransformerEncoderLayer's feed-forward
/// block; the dropout on the block's output belongs to the residual connection around it. With
/// a GELU activation, fc1's bias is added inside the GELU pass (the fused bias_gelu op); the
/// parameters are fc1's all the same.
/// Children: fc1 = Linear(d_model, hidden), dropout = Dropout(p), fc2 = Linear(hidden, d_model).
/// @ingroup nn
#pragma once
#include <memory>
#include <string>

#include "nn/dropout.hpp"
#include "nn/linear.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// The position-wise feed-forward network of a transformer block: fc2(dropout(activation(fc1(x)))).
class FeedForward : public UnaryModule {
 public:
  /// activation: "gelu" (exact), "gelu_tanh", "relu" (also "tanh", "sigmoid", "elu").
  FeedForward(int64_t d_model, int64_t hidden, std::string activation = "gelu", double dropout = 0.0,
              bool bias = true);
  /// x (..., d_model) -> (..., d_model)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FeedForward"; }
  std::string extra_repr() const override;

  std::string activation;  ///< the activation's name
  std::shared_ptr<Linear> fc1;  ///< (hidden, d_model)
  std::shared_ptr<Linear> fc2;  ///< (d_model, hidden)
  std::shared_ptr<Dropout> dropout;  ///< after the activation
};

}  // namespace attnlab::nn
/// @}

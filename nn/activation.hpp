/// @file
/// Activation layers: module wrappers of the activation ops in autograd/ops.hpp, so they can
/// sit in a Sequential. None has parameters.
/// @ingroup nn
#pragma once
#include <string>

#include "nn/module.hpp"

/// @addtogroup nn
/// @{
namespace attnlab::nn {

/// max(x, 0), elementwise.
class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

/// approximate: "none" (exact, x * Phi(x)) or "tanh" (Hendrycks & Gimpel's tanh form).
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");  ///< ValueError for another approximate
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  std::string approximate;  ///< "none" or "tanh"
};

/// tanh(x), elementwise.
class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

/// 1 / (1 + exp(-x)), elementwise.
class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

/// x for x > 0, alpha * (exp(x) - 1) otherwise.
class ELU : public UnaryModule {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}  ///< alpha: the value approached for x -> -inf is -alpha
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;
  double alpha;  ///< see above
};

/// Applies the activation named `name` ("relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "elu");
/// ValueError listing the choices otherwise. Used by layers configured by a string.
Tensor activation(const std::string& name, const Tensor& x);
void check_activation_name(const std::string& name, const char* who);  ///< ValueError from `who` listing the choices when activation() does not know `name`.

}  // namespace attnlab::nn
/// @}

/// @file
/// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, exactly as
/// torch.optim.SGD in PyTorch 1.13 (formulas in docs/optim.md):
///   d = g + wd * p
///   buf = d on the first step, else momentum * buf + (1 - dampening) * d
///   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
///   p = p - lr * d
/// @ingroup optim
#pragma once
#include "optim/optimizer.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// The options of SGD, as torch.optim.SGD's.
struct SGDOptions {
  double lr = kInherit;  ///< required (like torch), here or in every ParamGroup
  double momentum = 0;  ///< 0 = plain SGD
  double dampening = 0;  ///< the momentum buffer adds (1 - dampening) * g
  double weight_decay = 0;  ///< L2: added to the gradient
  bool nesterov = false;  ///< Nesterov momentum (needs momentum > 0 and dampening 0)
};

/// Stochastic gradient descent with momentum, exactly as torch.optim.SGD (see the file's description).
class SGD : public Optimizer {
 public:
  using Options = SGDOptions;  ///< the options type (generic code: Opt::Options)
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);  ///< SGD over parameter groups; ValueError for an invalid option or group
  SGD(const std::vector<Tensor>& params, const SGDOptions& options);  ///< SGD over one group of parameters

  void step() override;
  const SGDOptions& sgd_options() const { return options_; }  ///< the options it was built with

 protected:
  std::vector<BufferSpec> buffer_specs() const override;
  std::vector<std::pair<std::string, double>> options() const override;
  void set_options(const std::map<std::string, double>& values) override;

 private:
  SGDOptions options_;
};

}  // namespace attnlab::optim
/// @}

/// @file
/// Adam (Kingma & Ba, 2015) with L2 weight decay added to the gradient, and AdamW (Loshchilov
/// & Hutter, 2019) with decoupled weight decay, exactly as torch.optim.Adam / AdamW in PyTorch
/// 1.13 (amsgrad and maximize not supported). Per parameter, with t its own step count:
///   Adam:  g = g + wd * p                      AdamW: p = p * (1 - lr * wd)
///   m = beta1 * m + (1 - beta1) * g
///   v = beta2 * v + (1 - beta2) * g * g
///   step_size = lr / (1 - beta1^t)
///   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
///   p = p - step_size * m / denom
/// step() updates every parameter in one parallel pass over flat storage (optim/flat.hpp:
/// the first step moves the parameters and the moments into one buffer per dtype);
/// step_per_tensor() is its readable per-tensor twin, bitwise identical (docs/optim.md).
/// @ingroup optim
#pragma once
#include "optim/flat.hpp"
#include "optim/optimizer.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// The options of Adam, as torch.optim.Adam's.
struct AdamOptions {
  double lr = 1e-3;  ///< learning rate
  double beta1 = 0.9;  ///< decay of the first moment m
  double beta2 = 0.999;  ///< decay of the second moment v
  double eps = 1e-8;  ///< added to the denominator
  double weight_decay = 0;  ///< L2: added to the gradient
};

/// The options of AdamW, as torch.optim.AdamW's.
struct AdamWOptions {
  double lr = 1e-3;  ///< learning rate
  double beta1 = 0.9;  ///< decay of the first moment m
  double beta2 = 0.999;  ///< decay of the second moment v
  double eps = 1e-8;  ///< added to the denominator
  double weight_decay = 1e-2;  ///< decoupled: p *= 1 - lr * wd before the Adam update
};

/// Adam with L2 weight decay, exactly as torch.optim.Adam (see the file's description).
class Adam : public Optimizer {
 public:
  using Options = AdamOptions;  ///< the options type (generic code: Opt::Options)
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});  ///< Adam over parameter groups; ValueError for an invalid option or group
  Adam(const std::vector<Tensor>& params, const AdamOptions& options = {});  ///< Adam over one group of parameters

  /// One update of every parameter that has a gradient, as one parallel pass over all their
  /// elements (per dtype). Before it, parameters and state are (re)laid out flat if the
  /// parameter list changed since the last step (FlatStore::sync).
  void step() override;
  /// The same update, one loop per parameter tensor, without the flat pass: the oracle that
  /// step() is tested against bitwise. It does not move parameters.
  void step_per_tensor();
  /// The flat storage of the parameters of `dtype` that step() moved (a 1-d tensor; parameters
  /// are slices of it in group order); undefined before the first step() or when none moved.
  Tensor flat_parameters(DType dtype) const { return flat_.parameters(dtype); }
  /// Whether `param` lives in flat_parameters(param.dtype()).
  bool is_flat(const Tensor& param) const { return flat_.holds(param); }
  const AdamOptions& adam_options() const { return options_; }  ///< the options it was built with

 protected:
  /// AdamW's constructor: same state, decoupled decay.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, const char* name);

  std::vector<BufferSpec> buffer_specs() const override;
  std::vector<std::pair<std::string, double>> options() const override;
  void set_options(const std::map<std::string, double>& values) override;

 private:
  AdamOptions options_;
  bool decoupled_;
  detail::FlatStore flat_{{"exp_avg", "exp_avg_sq"}};
};

/// AdamW: Adam with decoupled weight decay, exactly as torch.optim.AdamW (see the file's description).
class AdamW : public Adam {
 public:
  using Options = AdamWOptions;  ///< the options type (generic code: Opt::Options)
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});  ///< AdamW over parameter groups; ValueError for an invalid option or group
  AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});  ///< AdamW over one group of parameters
};

}  // namespace attnlab::optim
/// @}

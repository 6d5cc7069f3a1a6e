/// @file
/// Optimizer: the base of every optimizer (SGD in optim/sgd.hpp, Adam and AdamW in
/// optim/adam.hpp). It owns the parameter groups, the per-parameter state buffers, zero_grad,
/// and the checkpoint format (state_dict / load_state_dict); a derived class owns only its
/// options and its fused update loop. Also here: decay_groups, the usual "no weight decay on
/// biases and norms" split. The update formulas follow PyTorch 1.13 (docs/optim.md).
///
/// optim/ sits above autograd/ and below nn/: it takes parameters as plain (named) tensors and
/// never includes a module header, so `named_parameters()` of any module feeds it directly.
/// @ingroup optim
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/io.hpp"
#include "tensor/tensor.hpp"

/// @addtogroup optim
/// @{
namespace attnlab::optim {

/// A value of lr or weight_decay in a ParamGroup meaning "take the optimizer's option".
inline constexpr double kInherit = std::numeric_limits<double>::quiet_NaN();

/// Parameters that share a learning rate and weight decay (torch's param_groups). lr and
/// weight_decay left at kInherit take the optimizer's options when the optimizer is built, so
/// after construction every group holds concrete values. The options specific to one optimizer
/// (momentum, betas, eps, ...) live in that optimizer's Options and apply to every group.
struct ParamGroup {
  std::vector<Tensor> params;  ///< the group's parameters (leaf tensors)
  std::vector<std::string> names = {};  ///< empty, or one per param (filled with "<group>.<index>" if empty)
  double lr = kInherit;  ///< this group's learning rate; kInherit = the optimizer's
  double weight_decay = kInherit;  ///< this group's weight decay; kInherit = the optimizer's
};

/// Splits named parameters into two groups, in this order:
///   group 0: every parameter that is at least 2-d and is not a bias or a norm, with
///            weight_decay = `weight_decay`;
///   group 1: the rest, with weight_decay = 0: every parameter with dim() < 2, every name that
///            is "bias" or ends in ".bias", and every name containing "norm" (any case, so
///            "ln.norm.weight" and "LayerNorm.weight" both count).
/// Both groups are always present (one may be empty) so that group indices in a checkpoint do
/// not depend on the model. lr is left to the optimizer.
std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, Tensor>>& named,
                                     double weight_decay);

/// The base of every optimizer: parameter groups, per-parameter state, checkpoints (state_dict).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter whose grad is defined (others are skipped, like torch).
  virtual void step() = 0;
  /// Zeroes every gradient in place (torch 1.13's default), so the next backward accumulates
  /// into the same buffers; set_to_none drops them instead.
  void zero_grad(bool set_to_none = false);

  std::vector<ParamGroup>& param_groups() { return groups_; }  ///< the groups (their lr may be changed between steps, e.g. by a Scheduler)
  const std::vector<ParamGroup>& param_groups() const { return groups_; }  ///< the groups
  /// Every parameter of every group, in group order (e.g. for clip_grad_norm_).
  std::vector<Tensor> parameters() const;
  /// Number of step() calls so far (restored by load_state_dict).
  int64_t step_count() const { return step_count_; }
  const std::string& name() const { return name_; }  ///< "SGD", "Adam" or "AdamW"

  /// The whole optimizer as tensors, for checkpoints (copies: later steps do not change them):
  ///   step                          int64 0-d, step_count()
  ///   param_groups.g.num_params     int64 0-d
  ///   param_groups.g.OPTION         float64 0-d: lr, weight_decay and the optimizer's options
  ///   state.g.i.BUFFER              the state of parameter i of group g (exp_avg, ...), only
  ///                                 for parameters that have state
  virtual TensorMap state_dict() const;
  /// Restores exactly (bitwise) what state_dict wrote. The map must describe this optimizer:
  /// same groups and parameter counts, buffer shapes and dtypes equal to the parameters', no
  /// missing or unknown keys; otherwise ValueError (DTypeError for a dtype) naming the key,
  /// and the optimizer is left unchanged.
  virtual void load_state_dict(const TensorMap& dict);

 protected:
  /// Resolves kInherit in the groups to these defaults and checks the parameters (defined,
  /// floating, leaves, none in two groups, at least one in all).
  Optimizer(std::vector<ParamGroup> groups, std::string name, double default_lr, double default_weight_decay);

  /// A per-parameter state buffer: `param_shaped` ones have the parameter's shape and dtype,
  /// the others are 0-d float64 (a step counter).
  struct BufferSpec {
    std::string name;  ///< the BUFFER of state.g.i.BUFFER ("exp_avg", "momentum_buffer", ...)
    bool param_shaped;  ///< true: the parameter's shape and dtype; false: 0-d float64
  };
  /// The buffers a parameter with state has (all of them, or none).
  virtual std::vector<BufferSpec> buffer_specs() const = 0;
  /// The optimizer's own options as (name, value); bools as 0/1.
  virtual std::vector<std::pair<std::string, double>> options() const = 0;
  /// Checks and sets the options (every name of options() is present).
  virtual void set_options(const std::map<std::string, double>& values) = 0;
  /// Throws ValueError when a group's lr or weight_decay is invalid; `where` names the group.
  void check_group(const ParamGroup& group, const std::string& where) const;

  /// The state of one parameter, created empty on first use.
  std::map<std::string, Tensor>& state_of(const Tensor& param) { return state_[param.impl()]; }
  const std::map<std::string, Tensor>* find_state(const Tensor& param) const;  ///< The state of one parameter, or null when it has none.

  std::string name_;  ///< what name() returns
  std::vector<ParamGroup> groups_;  ///< the parameter groups, kInherit resolved
  std::unordered_map<const TensorImpl*, std::map<std::string, Tensor>> state_;  ///< per parameter (by its TensorImpl): buffer name -> buffer
  int64_t step_count_ = 0;  ///< step() calls so far
};

namespace detail {
/// The parameter's data and gradient as contiguous buffers for a fused update loop (used by the
/// derived optimizers). When the parameter is not contiguous the loop runs on a copy that
/// finish() writes back.
struct UpdateTarget {
  UpdateTarget(const Tensor& param, const Tensor& grad, const char* op);
  void finish();
  Tensor param;  ///< the optimizer's parameter
  Tensor work;   ///< contiguous: param itself, or a copy of it
  Tensor grad;   ///< contiguous, same dtype and shape as param
};
}  // namespace detail

}  // namespace attnlab::optim
/// @}

/// @file
/// Head gates (docs/attention.md, "Head gates"): Hard Concrete gates with the expected-L0 penalty
/// (Louizos et al. 2018, as used for heads by Voita et al. 2019), and the fixed `head_mask`
/// buffer whose gradient is Michel et al.'s head importance.
/// @ingroup attention
#pragma once
#include "nn/attention/spec.hpp"
#include "nn/module.hpp"
#include "tensor/random.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// The gate options every multi-head variant accepts (gate, gate_init, ...; docs/attention.md, "Head gates").
struct GateConfig {
  std::string kind = "none";  ///< none | hard_concrete
  double init = 2.0;          ///< gate_init: log_alpha's initial value
  double temperature = 0.33;  ///< beta
  double gamma = -0.1;  ///< the stretch's lower end (Louizos et al.)
  double zeta = 1.1;  ///< the stretch's upper end
  bool hard = false;  ///< eval mode: g = 1 if the gate value > 0.5 else 0
};

/// Parameter `log_alpha` (hv). Train mode: one u per head per forward call (shared across the
/// batch) from the gate's own generator; eval mode: the deterministic gate.
class HardConcreteGate : public Module {
 public:
  HardConcreteGate(int64_t heads, const GateConfig& config);  ///< one gate per head, log_alpha = config.init
  /// g (hv)
  Tensor forward();
  /// sum_i sigmoid(log_alpha_i - beta * log(-gamma / zeta)), a 0-d tensor.
  Tensor l0_penalty() const;
  std::string type_name() const override { return "HardConcreteGate"; }
  Tensor log_alpha;  ///< (hv) parameter
  GateConfig config;  ///< what it was built from
  Generator gen;  ///< the gate's own noise generator
};

}  // namespace attnlab::nn
/// @}

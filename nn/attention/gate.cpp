#include "nn/attention/gate.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "tensor/kernels.hpp"

namespace attnlab::nn {

HardConcreteGate::HardConcreteGate(int64_t heads, const GateConfig& cfg)
    : config(cfg), gen(default_generator().next_u64()) {
  register_generator("generator", gen);  // gate noise: saved in checkpoints
  if (!(cfg.temperature > 0)) fail<ValueError>("gate: gate_temperature must be positive, got {}", cfg.temperature);
  if (!(cfg.gamma < 0 && cfg.zeta > 1))
    fail<ValueError>("gate: the stretch interval needs gate_gamma < 0 < 1 < gate_zeta, got gamma={} zeta={}", cfg.gamma,
                     cfg.zeta);
  log_alpha = register_parameter("log_alpha", full({heads}, cfg.init));
}

Tensor HardConcreteGate::forward() {
  const GateConfig& c = config;
  Tensor s;
  if (is_training()) {
    // u ~ U(eps, 1 - eps), one per head; s = sigmoid((log u - log(1 - u) + log_alpha) / beta)
    constexpr double kEps = 1e-6;
    Tensor u = rand(log_alpha.shape(), gen, log_alpha.dtype(), kEps, 1 - kEps);
    Tensor noise = log(u) - log(1.0 - u);
    s = sigmoid((noise + log_alpha) * (1.0 / c.temperature));
  } else {
    s = sigmoid(log_alpha);
  }
  Tensor g = clamp(s * (c.zeta - c.gamma) + c.gamma, 0.0, 1.0);  // (hv)
  if (!is_training() && c.hard) {
    NoGradGuard no_grad;  // a hard gate passes no gradient
    return attnlab::to(gt(g, 0.5), g.dtype());
  }
  return g;
}

Tensor HardConcreteGate::l0_penalty() const {
  const GateConfig& c = config;
  return sum(sigmoid(log_alpha - c.temperature * std::log(-c.gamma / c.zeta)));
}

}  // namespace attnlab::nn

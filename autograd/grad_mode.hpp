/// @file
/// Whether ops record history. NoGradGuard turns recording off for its scope (like
/// torch.no_grad()); the engine runs every backward formula under one.
/// ConservativeMode is for layer-wise relevance propagation (Ali et al. 2022, "XAI for
/// Transformers: Better Explanations through Conservative Propagation"): while it is on, softmax
/// returns its probabilities without history (the AH-rule), layer_norm (so nn::LayerNorm) runs
/// its composed form with 1/std constant (the LN-rule) and gelu(x) is recorded as
/// x * (gelu(x) / x) with the ratio constant (bias_gelu as gelu(x + bias)), so that gradient x
/// input is conservative through them (docs/analysis.md).
/// @ingroup autograd
#pragma once

/// @addtogroup autograd
/// @{
namespace attnlab {

/// The per-thread switch of history recording (on by default).
struct GradMode {
  static bool is_enabled();  ///< whether ops record history on this thread
  static void set_enabled(bool enabled);  ///< turns recording on or off on this thread (prefer NoGradGuard)
};

/// The per-thread switch of the conservative (LRP) forms of softmax, layer_norm and gelu.
struct ConservativeMode {
  static bool is_enabled();  ///< whether the conservative forms are on for this thread
  static void set_enabled(bool enabled);  ///< turns them on or off on this thread (prefer ConservativeModeGuard)
};

/// Turns ConservativeMode on for its scope (relevance propagation, docs/analysis.md).
class ConservativeModeGuard {
 public:
  ConservativeModeGuard() : prev_(ConservativeMode::is_enabled()) { ConservativeMode::set_enabled(true); }
  ~ConservativeModeGuard() { ConservativeMode::set_enabled(prev_); }
  ConservativeModeGuard(const ConservativeModeGuard&) = delete;
  ConservativeModeGuard& operator=(const ConservativeModeGuard&) = delete;

 private:
  bool prev_;
};

/// Turns history recording off for its scope, like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace attnlab
/// @}

/// @file
/// Mixed precision, like torch.autocast: inside an AutocastGuard(kBFloat16) scope, matmul (and
/// every op built on it: linear layers, einsum) rounds its float32 operands to bfloat16 and
/// multiplies them with float32 accumulation and a float32 result (kernels::matmul_bf16). Its
/// backward multiplies the same bf16 operands by the gradient rounded to bf16, again into
/// float32, so every gradient that reaches a parameter is float32 and the parameters (the master
/// weights), optimizer state, reductions, softmax statistics, layer norm and losses all stay
/// float32. Float64 operands (gradient checks) are never cast.
///
/// Whether the scope engages is decided once per guard from the build and the CPU:
///   ATTNLAB_AUTOCAST=native (default)  bf16 when built with oneDNN and the CPU has AVX512_BF16 or
///                                      AMX-BF16 (elsewhere bf16 products are slower than float32)
///   ATTNLAB_AUTOCAST=force             bf16 whenever built with oneDNN (tests, measurements)
///   ATTNLAB_AUTOCAST=off               never
/// Without oneDNN the scope stays float32 and says so once on stderr. The state is per thread,
/// like NoGradGuard's; the engine runs backward formulas outside the scope, and a product's
/// backward follows the precision its forward used.
/// @ingroup autograd
#pragma once
#include <string>

#include "tensor/dtype.hpp"

/// @addtogroup autograd
/// @{
namespace attnlab {

/// When an AutocastGuard(kBFloat16) engages (ATTNLAB_AUTOCAST; see above).
enum class AutocastPolicy { Native, Force, Off };

/// The policy named by ATTNLAB_AUTOCAST ("native", "force", "off"; unset = native). Throws
/// ValueError naming the variable for any other value.
AutocastPolicy autocast_policy_from_env();

/// What an AutocastGuard does on this build and CPU, and why.
struct AutocastDecision {
  bool bf16 = false;    ///< whether products run in bf16
  std::string reason;   ///< one line: why, with the oneDNN build and the CPU's bf16 flags
};
/// What a guard with `policy` does on this build and CPU.
AutocastDecision autocast_decision(AutocastPolicy policy);

/// The per-thread autocast switch (AutocastGuard sets it for a scope).
struct AutocastMode {
  /// Whether matmul casts float32 operands to bf16 on this thread now.
  static bool is_enabled();
  static void set_enabled(bool enabled);  ///< turns casting on or off on this thread (prefer AutocastGuard)
};

/// Runs products in bfloat16 in its scope when the policy and the CPU allow it (see above).
class AutocastGuard {
 public:
  /// dtype: kBFloat16 (the one mixed-precision dtype) or kFloat32 (a float32 region inside an
  /// autocast scope, like torch.autocast(enabled=False)).
  explicit AutocastGuard(DType dtype = kBFloat16, AutocastPolicy policy = autocast_policy_from_env());
  ~AutocastGuard() { AutocastMode::set_enabled(prev_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  bool bf16() const { return AutocastMode::is_enabled(); }  ///< whether products in this scope run in bfloat16

 private:
  bool prev_;
};

}  // namespace attnlab
/// @}

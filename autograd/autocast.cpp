#include "autograd/autocast.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "tensor/bf16_info.hpp"
#include "tensor/error.hpp"

namespace attnlab {
namespace {

thread_local bool autocast_enabled = false;

}  // namespace

bool AutocastMode::is_enabled() { return autocast_enabled; }
void AutocastMode::set_enabled(bool enabled) { autocast_enabled = enabled; }

AutocastPolicy autocast_policy_from_env() {
  const char* v = std::getenv("ATTNLAB_AUTOCAST");
  if (!v || !*v || std::strcmp(v, "native") == 0) return AutocastPolicy::Native;
  if (std::strcmp(v, "force") == 0) return AutocastPolicy::Force;
  if (std::strcmp(v, "off") == 0) return AutocastPolicy::Off;
  fail<ValueError>("ATTNLAB_AUTOCAST={}: expected native, force or off", v);
}

AutocastDecision autocast_decision(AutocastPolicy policy) {
  const std::string cpu = cpu_bf16_summary();
  if (policy == AutocastPolicy::Off) return {false, "float32: ATTNLAB_AUTOCAST=off"};
  if (!onednn_built()) return {false, "float32: attnlab is built without oneDNN (CMake found no libdnnl-dev)"};
  const bool native = cpu_has_native_bf16();
  if (native) return {true, fmt::format("bf16: {}, native bf16 on {}", onednn_description(), cpu)};
  if (policy == AutocastPolicy::Force)
    return {true, fmt::format("bf16 (forced by ATTNLAB_AUTOCAST=force; slower than float32 here): {}, no native "
                              "bf16 on {}", onednn_description(), cpu)};
  return {false, fmt::format("float32: no native bf16 (AVX512_BF16 or AMX) on {}; ATTNLAB_AUTOCAST=force overrides", cpu)};
}

AutocastGuard::AutocastGuard(DType dtype, AutocastPolicy policy) : prev_(AutocastMode::is_enabled()) {
  if (dtype == kFloat32) {
    AutocastMode::set_enabled(false);
    return;
  }
  if (dtype != kBFloat16)
    fail<DTypeError>("AutocastGuard: autocast runs products in bfloat16 (or float32 to leave it), got {}",
                     dtype_name(dtype));
  const AutocastDecision d = autocast_decision(policy);
  if (!d.bf16 && policy != AutocastPolicy::Off) {
    static std::once_flag said;
    std::call_once(said, [&] { std::fprintf(stderr, "attnlab: autocast(bfloat16) stays %s\n", d.reason.c_str()); });
  }
  AutocastMode::set_enabled(d.bf16);
}

}  // namespace attnlab

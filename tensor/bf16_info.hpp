/// @file
/// What bfloat16 matrix products run on: oneDNN, an optional dependency (Debian libdnnl-dev;
/// CMakeLists.txt, like MPI), and whether this CPU multiplies bf16 in hardware: AVX512_BF16
/// (vdpbf16ps: Cooper Lake, Sapphire Rapids, AMD Zen 4 and later) or AMX-BF16 (Sapphire Rapids).
/// Without either, oneDNN converts bf16 to float32 and a bf16 product is 3-5x slower than a
/// float32 one (docs/performance.md, section 11), so autocast only engages where this says yes.
/// @ingroup tensor
#pragma once
#include <string>
#include <vector>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// Whether attnlab was built with oneDNN.
bool onednn_built();
/// "oneDNN 2.6.3 (CPU runtime OpenMP)", or "not built (CMake found no oneDNN)".
std::string onednn_description();
/// The oneDNN implementations bf16 products have dispatched to so far in this process, e.g.
/// "brg:avx512_core_bf16" (sorted, each once). Empty without oneDNN or before the first one.
std::vector<std::string> onednn_kernels_used();

/// Whether the CPU has AVX512_BF16 or AMX-BF16 (cpuid, leaf 7).
bool cpu_has_native_bf16();
/// The CPU's model name and the bf16-relevant flags it has, for logs and benchmark tables:
/// "AMD EPYC (avx512f avx512_bf16)". From /proc/cpuinfo; the flags from cpuid where it lacks them.
std::string cpu_bf16_summary();

}  // namespace attnlab
/// @}

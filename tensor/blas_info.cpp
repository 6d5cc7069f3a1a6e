#include "tensor/blas_info.hpp"

#include <cstdlib>
#include <string>

#include <cblas.h>
#include <fmt/format.h>

namespace attnlab {

std::string blas_description() {
  return fmt::format("{} (kernel {})", openblas_get_config(), openblas_get_corename());
}

std::string blas_kernel_hint() {
  const std::string core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") || core != "Prescott") return "";
  const char* better = __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : "";
  if (!*better) return "";
  return fmt::format("note: OpenBLAS chose its generic Prescott (SSE3) kernels on a CPU with {}; "
                     "OPENBLAS_CORETYPE={} selects faster ones (matrix products then round differently, so "
                     "keep one choice within a study; docs/performance.md, section 11)",
                     better == std::string("SkylakeX") ? "AVX-512" : "AVX2", better);
}

}  // namespace attnlab

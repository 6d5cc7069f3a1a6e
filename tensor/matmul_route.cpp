// The float32 matrix-product route (tensor/matmul_route.hpp): the setting, ATTNLAB_MATMUL's
// parsing, and the `auto` rule measured in docs/performance.md, section 11.
#include "tensor/matmul_route.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "tensor/bf16_info.hpp"
#include "tensor/error.hpp"

namespace attnlab {
namespace {

constexpr const char* kVariable = "ATTNLAB_MATMUL";

// -1 until set_matmul_route or the first successful read of ATTNLAB_MATMUL.
std::atomic<int> g_route{-1};

// OpenBLAS's AVX-512 kernels (its DYNAMIC_ARCH core names).
bool blas_kernel_has_avx512(std::string_view core) {
  return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
}

}  // namespace

const char* matmul_route_name(MatmulRoute route) {
  switch (route) {
    case MatmulRoute::Auto: return "auto";
    case MatmulRoute::OpenBLAS: return "openblas";
    case MatmulRoute::OneDNN: return "onednn";
  }
  return "?";
}

MatmulRoute parse_matmul_route(const std::string& value, const std::string& source) {
  MatmulRoute r;
  if (value == "auto")
    r = MatmulRoute::Auto;
  else if (value == "openblas")
    r = MatmulRoute::OpenBLAS;
  else if (value == "onednn")
    r = MatmulRoute::OneDNN;
  else
    fail<ValueError>("{}=\"{}\": expected auto, openblas or onednn", source, value);
  if (r == MatmulRoute::OneDNN && !onednn_built())
    fail<ValueError>("{}=onednn: this attnlab was built without oneDNN ({}); expected auto or openblas", source,
                     onednn_description());
  return r;
}

MatmulRoute matmul_route_from_environment() {
  const char* env = std::getenv(kVariable);
  return env && *env ? parse_matmul_route(env, kVariable) : MatmulRoute::Auto;
}

MatmulRoute matmul_route() {
  int r = g_route.load(std::memory_order_relaxed);
  if (r >= 0) return MatmulRoute(r);
  const MatmulRoute parsed = matmul_route_from_environment();
  int expected = -1;
  g_route.compare_exchange_strong(expected, int(parsed));
  return MatmulRoute(g_route.load());
}

void set_matmul_route(MatmulRoute route) {
  if (route == MatmulRoute::OneDNN && !onednn_built())
    fail<ValueError>("set_matmul_route(onednn): this attnlab was built without oneDNN ({})", onednn_description());
  g_route.store(int(route));
}

bool matmul_auto_uses_onednn() {
  static const bool yes = onednn_built() && __builtin_cpu_supports("avx512f");
  return yes;
}

double matmul_auto_min_flops() {
  static const double flops =
      blas_kernel_has_avx512(openblas_get_corename()) ? kOnednnMinFlopsBlasAvx512 : kOnednnMinFlops;
  return flops;
}

bool float32_matmul_on_onednn(int64_t batches, int64_t rows, int64_t cols, int64_t k) {
  switch (matmul_route()) {
    case MatmulRoute::OpenBLAS: return false;
    case MatmulRoute::OneDNN: return true;
    case MatmulRoute::Auto: break;
  }
  return matmul_auto_uses_onednn() &&
         2.0 * double(batches) * double(rows) * double(cols) * double(k) >= matmul_auto_min_flops();
}

std::string matmul_route_description() {
  const MatmulRoute r = matmul_route();
  const std::string blas = fmt::format("OpenBLAS kernel {}", openblas_get_corename());
  switch (r) {
    case MatmulRoute::OpenBLAS: return fmt::format("openblas: float32 products on OpenBLAS ({})", blas);
    case MatmulRoute::OneDNN: return fmt::format("onednn: float32 products on {}", onednn_description());
    case MatmulRoute::Auto: break;
  }
  if (!matmul_auto_uses_onednn())
    return fmt::format("auto: float32 products on OpenBLAS ({}; {})", blas,
                       onednn_built() ? "no AVX-512 for oneDNN's kernels" : "no oneDNN in this build");
  return fmt::format("auto: float32 products of {:g} MFLOP or more on {}, the rest on OpenBLAS ({})",
                     matmul_auto_min_flops() * 1e-6, onednn_description(), blas);
}

}  // namespace attnlab

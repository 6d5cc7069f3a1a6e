/// @file
/// Which library multiplies float32 matrices: OpenBLAS or oneDNN (when attnlab is built with it).
/// Both are float32 products with float32 accumulation; they differ in speed per shape and CPU,
/// and in the order of their sums, so results differ in the last bits between routes. The route
/// is therefore fixed per process by the machine and the environment (never by timing), logged
/// by `attnlab run` and recorded in meta.json (`matmul`), so the runs of a study share it.
///
/// ATTNLAB_MATMUL=auto|openblas|onednn chooses (default auto); set_matmul_route overrides it.
/// `auto` sends a float32 product to oneDNN when attnlab is built with oneDNN, the CPU has
/// AVX-512 (oneDNN's avx512_core kernels), and the product has at least
/// matmul_auto_min_flops() floating-point operations (2 n m k per batch element, times the
/// batch): kOnednnMinFlops under an OpenBLAS kernel without AVX-512 (Haswell, Zen, Prescott:
/// there oneDNN is about 2x faster from 8 MFLOP up), kOnednnMinFlopsBlasAvx512 under OpenBLAS's
/// AVX-512 kernels (SkylakeX: the two tie up to about 130 MFLOP and oneDNN is 1.03-1.3x faster
/// on the LM steps' products of 268 MFLOP and more). Below the bound oneDNN's per-call cost
/// outweighs its faster kernel. Measured in docs/performance.md, section 11, "Routing float32
/// products to oneDNN".
/// float64 products always run on OpenBLAS.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <string>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// Where float32 matrix products run.
enum class MatmulRoute : uint8_t {
  Auto,      ///< per product, by the rule in this header
  OpenBLAS,  ///< always OpenBLAS
  OneDNN,    ///< always oneDNN (an error on a build without it)
};

/// Under `auto` with an OpenBLAS kernel without AVX-512, the smallest product (2 n m k per batch
/// element, times the batch) sent to oneDNN.
inline constexpr double kOnednnMinFlops = 8e6;
/// Under `auto` with an OpenBLAS AVX-512 kernel (SkylakeX, Cooperlake, SapphireRapids), the
/// smallest product sent to oneDNN.
inline constexpr double kOnednnMinFlopsBlasAvx512 = 2e8;

/// "auto", "openblas" or "onednn".
const char* matmul_route_name(MatmulRoute route);

/// Parses "auto", "openblas" or "onednn". A bad value, or "onednn" on a build without oneDNN,
/// throws ValueError naming `source` (the variable or option), the value and the accepted ones.
MatmulRoute parse_matmul_route(const std::string& value, const std::string& source);

/// ATTNLAB_MATMUL's route as the environment holds it now: Auto when unset or empty,
/// ValueError (naming the variable) when bad. matmul_route() reads it once.
MatmulRoute matmul_route_from_environment();

/// The route in force: set_matmul_route's, else ATTNLAB_MATMUL's as first read (ValueError
/// when it is bad), else Auto.
MatmulRoute matmul_route();

/// Overrides ATTNLAB_MATMUL for this process (benchmarks, tests). OneDNN on a build without
/// oneDNN throws ValueError.
void set_matmul_route(MatmulRoute route);

/// Whether Auto may send any float32 product to oneDNN on this machine: built with oneDNN and a
/// CPU with AVX-512.
bool matmul_auto_uses_onednn();

/// Auto's bound for the OpenBLAS kernel loaded in this process: kOnednnMinFlops, or
/// kOnednnMinFlopsBlasAvx512 under an AVX-512 kernel.
double matmul_auto_min_flops();

/// Whether the float32 product of `batches` (rows, k) @ (k, cols) matrices runs on oneDNN under
/// the route in force.
bool float32_matmul_on_onednn(int64_t batches, int64_t rows, int64_t cols, int64_t k);

/// One line for run logs and meta.json: the route and what it does here, e.g. "auto: float32
/// products of 8 MFLOP or more on oneDNN 2.6.3 (CPU runtime OpenMP), the rest on OpenBLAS
/// (OpenBLAS kernel Haswell)".
std::string matmul_route_description();

/// Sets a route for a scope and restores the previous one.
class MatmulRouteGuard {
 public:
  /// Sets `route` (ValueError as set_matmul_route).
  explicit MatmulRouteGuard(MatmulRoute route) : prev_(matmul_route()) { set_matmul_route(route); }
  ~MatmulRouteGuard() { set_matmul_route(prev_); }  ///< restores the previous route
  MatmulRouteGuard(const MatmulRouteGuard&) = delete;
  MatmulRouteGuard& operator=(const MatmulRouteGuard&) = delete;

 private:
  MatmulRoute prev_;
};

}  // namespace attnlab
/// @}

/// @file
/// Which BLAS attnlab's matrix products run on. OpenBLAS built with DYNAMIC_ARCH (Debian's)
/// picks its kernels from the CPU's identity when it is loaded; on a virtual machine whose CPUID
/// names no model it falls back to the SSE3 "Prescott" kernels, about 3x slower than the AVX-512
/// ones on the same CPU (docs/performance.md, section 11). OPENBLAS_CORETYPE, read by OpenBLAS
/// before main, overrides the choice.
/// @ingroup tensor
#pragma once
#include <string>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// The BLAS build and the kernel it chose, e.g. "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...
/// (kernel Prescott)". Runs record it (meta.json): products round differently per kernel.
std::string blas_description();

/// "" when the kernel fits the CPU; otherwise one line saying what OpenBLAS chose, what the CPU
/// can do, and the OPENBLAS_CORETYPE value that selects it (SkylakeX for AVX-512, Haswell for
/// AVX2). Only the fallback kernel is questioned, and only when OPENBLAS_CORETYPE is unset.
std::string blas_kernel_hint();

}  // namespace attnlab
/// @}

#include "tensor/bf16_info.hpp"

#include <cpuid.h>
#include <fmt/format.h>

#include <fstream>
#include <utility>
#include <sstream>

#ifdef ATTNLAB_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace attnlab {
namespace {

struct CpuBf16 {
  bool avx512f = false, avx512_bf16 = false, amx_bf16 = false;
};

CpuBf16 detect() {
  CpuBf16 c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) {
    c.avx512f = (b >> 16) & 1;
    c.amx_bf16 = (d >> 22) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &cx, &d)) c.avx512_bf16 = c.avx512f && ((a >> 5) & 1);
  c.avx512f = c.avx512f && __builtin_cpu_supports("avx512f");  // the OS saves the AVX-512 state
  c.avx512_bf16 = c.avx512_bf16 && c.avx512f;
  return c;
}

const CpuBf16& cpu() {
  static const CpuBf16 c = detect();
  return c;
}

}  // namespace

bool onednn_built() {
#ifdef ATTNLAB_WITH_DNNL
  return true;
#else
  return false;
#endif
}

std::string onednn_description() {
#ifdef ATTNLAB_WITH_DNNL
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} (CPU runtime {})", v->major, v->minor, v->patch,
                     v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other");
#else
  return "not built (CMake found no oneDNN)";
#endif
}

bool cpu_has_native_bf16() { return cpu().avx512_bf16 || cpu().amx_bf16; }

namespace {

std::string summarize_cpu() {
  std::string model = "unknown CPU", flags;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "model name" && model == "unknown CPU") model = line.substr(line.find_first_not_of(' ', colon + 1));
    if (key == "flags" && flags.empty()) flags = fmt::format(" {} ", line.substr(colon + 1));
  }
  const std::pair<const char*, bool> wanted[] = {
      {"avx512f", cpu().avx512f}, {"avx512_bf16", cpu().avx512_bf16}, {"amx_bf16", cpu().amx_bf16}, {"amx_tile", false}};
  std::string have;
  for (const auto& [flag, by_cpuid] : wanted)
    if (by_cpuid || flags.find(fmt::format(" {} ", flag)) != std::string::npos)
      have.append(have.empty() ? "" : " ").append(flag);
  return fmt::format("{} ({})", model, have.empty() ? "no AVX-512, no bf16" : have);
}

}  // namespace

std::string cpu_bf16_summary() {
  static const std::string s = summarize_cpu();
  return s;
}

}  // namespace attnlab

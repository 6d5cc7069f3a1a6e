// The last-level cache size, for map.hpp's choice of streaming stores.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "tensor/kernels/map.hpp"
#include "tensor/option_string.hpp"

namespace attnlab::kernels {

int64_t parse_cache_size(const std::string& text) {
  const size_t used = std::min(text.find_first_not_of("0123456789"), text.size());
  const std::optional<int64_t> value = parse_integer(std::string_view(text).substr(0, used));
  if (!value || *value <= 0) return -1;
  const std::string unit = text.substr(used, text.find_first_of(" \n", used) - used);
  const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  if (shift < 0 || *value > (std::numeric_limits<int64_t>::max() >> shift)) return -1;
  return *value << shift;
}

namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The largest data or unified cache of cpu 0 that sysfs lists (the kernel's view, what lscpu
// prints), or -1.
int64_t sysfs_last_level_cache() {
  int best_level = 0;
  int64_t best = -1;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string level = read_line(dir + "level");
    if (level.empty()) break;
    if (read_line(dir + "type") == "Instruction") continue;
    const int64_t size = parse_cache_size(read_line(dir + "size"));
    const int lv = std::atoi(level.c_str());
    if (size > 0 && lv >= best_level) best_level = lv, best = size;
  }
  return best;
}

}  // namespace

int64_t last_level_cache_bytes() {
  // sysfs first: glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) derives the size from CPUID, which under
  // some hypervisors describes the host's whole L3 (on this project's EPYC VM: 256 MB, where
  // sysfs and lscpu say 32 MB), and then no op would ever stream.
  static const int64_t bytes = [] {
    if (int64_t s = sysfs_last_level_cache(); s > 0) return s;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return int64_t(l3 > 0 ? l3 : l2 > 0 ? l2 : 32L << 20);
  }();
  return bytes;
}

}  // namespace attnlab::kernels

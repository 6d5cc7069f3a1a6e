// Shared by the benchmark programs: the median of timings, and the parser of `--name value`
// integer flags (bench_packed).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Reads `--name value` pairs into the flags' slots; a missing value or an unknown flag prints the
// usage line and exits with status 2.
inline void parse_flags(int argc, char** argv, const std::string& usage,
                        const std::vector<std::pair<std::string, int64_t*>>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == a; });
    if (it == flags.end() || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s\n", usage.c_str());
      std::exit(2);
    }
    *it->second = std::atoll(argv[++i]);
  }
}

}  // namespace attnlab::bench

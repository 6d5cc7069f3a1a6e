// Shared by the benchmark programs: the median of timings, and the command line through CLI11
// with the exit codes every program keeps (0 for --help, 2 for a bad argument).
#pragma once
#include <algorithm>
#include <cstdlib>
#include <vector>

#include <CLI/CLI.hpp>

namespace attnlab::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Parses argv into `app`'s options: --help prints the usage and exits 0; an unknown argument, a
// missing value or one that fails its check prints what is wrong and the usage, and exits 2.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
}

}  // namespace attnlab::bench

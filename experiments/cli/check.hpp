/// @file
/// `attnlab check SPEC [--d-model D] [--length N]... [--skip CHECK]...`: the conformance suite
/// (experiments/check/conformance.hpp) on one attention spec, one line per check (docs/cli.md).
/// `attnlab check --all`: the suite on every registered variant's default spec, one line per
/// variant and the lines of its failed checks. main.cpp adds it with one line.
/// @ingroup cli
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

// CLI11 is included only by the .cpp files that declare options: it is the costliest header to
// compile (docs/testing.md, "Build time").
namespace CLI {
class App;
}

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// The options of `attnlab check SPEC`.
struct CheckCommandOptions {
  std::string spec;     ///< the variant checked
  int64_t d_model = 8;  ///< the layer's width
  std::vector<int64_t> lengths;    ///< empty: the suite picks two
  std::vector<std::string> skip;  ///< check names to skip
  bool all = false;               ///< every registered variant by its bare name instead of `spec`
};
/// Exit status: 0 every check passed (or was skipped), 1 a check failed, 2 a spec that does not
/// parse, names no registered variant, or an unknown --skip name (the error on `err`).
/// With `all`, 1 when a check of some variant failed.
int run_check(const CheckCommandOptions& options, std::ostream& out, std::ostream& err);

/// Adds `check` to the tool; its callback stores the exit status in `status`.
void add_check_command(CLI::App& app, int& status);

}  // namespace attnlab::cli
/// @}

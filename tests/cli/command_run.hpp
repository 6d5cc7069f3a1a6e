// Running one of the attnlab command functions (cli::run_generate, cli::run_variants, ...) from a
// test with its exit status, stdout and stderr captured.
#pragma once
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace attnlab::testing {

struct CommandRun {
  int status;
  std::string out, err;
};

inline CommandRun run_command(int (*command)(const std::vector<std::string>&, std::ostream&, std::ostream&),
                              const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = command(args, out, err);
  return {status, out.str(), err.str()};
}

}  // namespace attnlab::testing

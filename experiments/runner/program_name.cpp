#include "experiments/runner/program_name.hpp"

namespace attnlab::runner {

namespace {
std::string& storage() {
  static std::string name = "attnlab";
  return name;
}
}  // namespace

const std::string& program_name() { return storage(); }

void set_program_name(const std::string& argv0) {
  const std::string name = argv0.substr(argv0.find_last_of('/') + 1);  // npos + 1 == 0: no directory
  storage() = name.empty() ? "attnlab" : name;
}

}  // namespace attnlab::runner

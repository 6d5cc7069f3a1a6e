// The attnlab CLI's attention commands as plain functions, so that tests call them directly with
// argument vectors and string streams; main.cpp only dispatches (docs/cli.md).
//   attnlab variants [NAME] [--params SPEC --d-model D]
//   attnlab inspect --spec SPEC --d-model D (--weights W | --init) --input X --out OUT ...
//   attnlab generate --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature T] ...
//   attnlab explain SPEC --d-model D --seq N [--batch B]
//   attnlab demo [--out DIR] [--steps N] [--workers N] | --mlp   (the attention shoot-out)
// Each returns the process exit status: 0 success, 1 a failure while running (bad spec, file,
// tensor name, shape or dtype), 2 a usage error (unknown or missing option, unparsable value).
// Messages go to `err`, one line starting with "attnlab <command>:".
#pragma once
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "tensor/error.hpp"

namespace attnlab::cli {

int run_variants(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_explain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
void variants_usage(std::ostream& out);
void inspect_usage(std::ostream& out);
void generate_usage(std::ostream& out);
void explain_usage(std::ostream& out);
void demo_usage(std::ostream& out);

// ---- shared by the commands ----

// A mistake in the command line itself (exit status 2), as opposed to a failure while running.
struct UsageError : ValueError {
  using ValueError::ValueError;
};

// "--name value", "--name=value", bare "--flag"s and positional words, checked against the
// options a command knows, so that a typo is an error instead of being ignored.
class ArgList {
 public:
  ArgList(const std::vector<std::string>& args, const std::set<std::string>& valued, const std::set<std::string>& flags) {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a.rfind("--", 0) != 0 || a == "--") {
        positional_.push_back(a);
        continue;
      }
      const size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      if (flags.count(name)) {
        if (eq != std::string::npos) fail<UsageError>("option {} takes no value, got '{}'", name, a);
        flags_.insert(name);
      } else if (valued.count(name)) {
        if (values_.count(name)) fail<UsageError>("option {} is given twice", name);
        if (eq != std::string::npos) {
          values_[name] = a.substr(eq + 1);
        } else {
          if (i + 1 == args.size()) fail<UsageError>("option {} needs a value", name);
          values_[name] = args[++i];
        }
      } else {
        std::string known;
        for (const auto* set : {&valued, &flags})
          for (const auto& k : *set) known += (known.empty() ? "" : ", ") + k;
        fail<UsageError>("unknown option '{}' (known: {})", name, known);
      }
    }
  }
  std::optional<std::string> get(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::string require(const std::string& name) const {
    auto v = get(name);
    if (!v) fail<UsageError>("missing {}", name);
    return *v;
  }
  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

// The whole of `text` as an integer in [lo, hi]; UsageError naming the option otherwise.
inline int64_t parse_int_option(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    fail<UsageError>("{} must be an integer, got '{}'", option, text);
  if (v < lo || v > hi) fail<UsageError>("{} must be in [{}, {}], got {}", option, lo, hi, v);
  return v;
}

}  // namespace attnlab::cli

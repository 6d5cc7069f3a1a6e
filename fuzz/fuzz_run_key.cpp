// Fuzz target: the run keys of `attnlab run lm --set KEY=VALUE ...` (experiments/runner/config.cpp,
// experiment.cpp): every line of the input is one --set assignment, resolved against the lm
// experiment's real schema (every key bounded: docs/experiments.md, "Bounded counts") and then
// checked as `attnlab run` checks a config before anything is created (check_config: the
// experiment's check, which parses the attention spec and builds one transformer block, and the
// micro-batch split). A config asking for a large model (model.d_model > 256, model.ffn_hidden >
// 1024, or a spec with a number of five digits or more) is resolved but not built: a large model
// the user asked for is no finding. Identity checked on every config that resolves: its TOML form
// merges into a fresh config of the same schema as the same config.
#include <sstream>
#include <string>
#include <vector>

#include "experiments/runner/experiment.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;

namespace {

// A run of five or more digits: an option value of at least 10000.
bool has_large_number(const std::string& s) {
  int run = 0;
  for (char c : s) {
    run = (c >= '0' && c <= '9') ? run + 1 : 0;
    if (run >= 5) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_run_key", [&] {
    std::vector<std::string> sets;
    std::istringstream in{std::string(fuzz::as_text(data, size))};
    for (std::string line; std::getline(in, line) && sets.size() < 32;) sets.push_back(line);
    const runner::Experiment& e = runner::find_experiment("lm");
    const runner::Config config = runner::resolve_config(e, "", "", sets);
    runner::Config again(e.schema);
    fuzz::must_succeed("fuzz_run_key", "merge_toml(to_toml())", [&] { again.merge_toml(config.to_toml(), "resolved"); });
    fuzz::require(again.to_toml() == config.to_toml(), "fuzz_run_key", "to_toml does not merge back into the same config");
    if (config.get_int("model.d_model") > 256 || config.get_int("model.ffn_hidden") > 1024 ||
        has_large_number(config.get_string("model.attention")))
      return;
    runner::check_config(e, config, 1);
  });
}

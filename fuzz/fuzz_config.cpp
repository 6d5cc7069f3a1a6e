// Fuzz target: experiment configs (experiments/runner/config.cpp): a `--set key=value` assignment
// and a TOML config file, against a schema with a key of every type. The input's first line is the
// assignment, the rest the TOML text. Identities checked on every input that merges: the resolved
// config written as TOML merges into a fresh config as the same one (compared as TOML text, so a
// NaN equals itself), and its JSON form parses.
#include <nlohmann/json.hpp>

#include "experiments/runner/config.hpp"
#include "fuzz/fuzz_common.hpp"

using namespace attnlab;
using runner::Config;

namespace {

runner::Schema schema() {
  return runner::Schema()
      .add("seed", int64_t(0), "an int")
      .add("train.steps", int64_t(10), "an int in a table")
      .add("train.lr", 1e-3, "a float")
      .add("model.causal", false, "a bool")
      .add("model.attention", "mha", "a string")
      .add("model.block.name", "x", "a string two tables deep");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded("fuzz_config", [&] {
    const std::string_view text = fuzz::as_text(data, size);
    const size_t eol = text.find('\n');
    Config config(schema());
    try {
      config.set(std::string(text.substr(0, eol)));
    } catch (const Error&) {
    }
    if (eol != std::string_view::npos) config.merge_toml(std::string(text.substr(eol + 1)), "fuzz.toml");
    // The resolved config is what a run directory keeps (config.toml) and reads back on resume.
    const std::string resolved = config.to_toml();
    Config again(schema());
    fuzz::must_succeed("fuzz_config", "merge_toml(to_toml())", [&] { again.merge_toml(resolved, "resolved"); });
    // Compared as text, so that a NaN value equals itself.
    fuzz::require(again.to_toml() == resolved, "fuzz_config", "to_toml does not merge back into the same config");
    fuzz::require(nlohmann::json::accept(config.to_json()), "fuzz_config", "to_json is not JSON");
  });
}

// Running a catalog experiment from a test: a fresh run directory, the run with `key=value`
// overrides, and its files read back.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/runner/experiment.hpp"

namespace attnlab::testing {

// An empty path under the temp directory, unique to this process: attnlab_test_<prefix>_<name>_<pid>.
inline std::filesystem::path fresh_run_dir(const std::string& prefix, const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / fmt::format("attnlab_test_{}_{}_{}", prefix, name, long(getpid()));
  std::filesystem::remove_all(d);
  return d;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `experiment` (no preset) into `dir` with `base` then `extra` overrides (later ones win);
// returns the exit status and, if asked, what it printed.
inline int run_catalog(const std::string& experiment, const std::filesystem::path& dir, std::vector<std::string> base,
                       const std::vector<std::string>& extra, std::string* console_out = nullptr) {
  base.insert(base.end(), extra.begin(), extra.end());
  std::ostringstream console;
  runner::RunRequest r{experiment, "", "", base, dir, "test"};
  const int status = runner::run_experiment(r, console, false);
  if (console_out) *console_out = console.str();
  return status;
}

// A tiny lm run (context 24, 4 steps, d_model 16) into `dir`; returns the exit status.
inline int tiny_lm(const std::filesystem::path& dir, const std::vector<std::string>& extra,
                   std::string* console = nullptr) {
  return run_catalog("lm", dir,
                     {"task.length=24", "train.steps=4", "train.eval_every=4", "train.batch_size=4", "eval.batches=1",
                      "model.d_model=16", "model.ffn_hidden=32", "model.attention=mha(heads=2)"},
                     extra, console);
}

// summary.json's "metrics" of a finished run.
inline nlohmann::json summary_metrics(const std::filesystem::path& dir) {
  return nlohmann::json::parse(slurp(dir / "summary.json"))["metrics"];
}

}  // namespace attnlab::testing

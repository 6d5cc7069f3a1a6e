// A tiny run of the catalog's lm experiment and edits of its config.toml, for the tests of the
// commands that read lm runs (generate, analyze, viz) and of the runs that resume them.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "runner/catalog_run.hpp"

namespace attnlab::testing {

// A tiny finished lm run (width 16, one block, context 24, 3 steps) into a fresh directory.
inline std::vector<std::string> tiny_lm_sets() {
  return {"task.length=24",   "train.steps=3",    "train.eval_every=3",  "train.batch_size=2",          "eval.batches=1",
          "model.d_model=16", "model.layers=1",   "model.ffn_hidden=32", "model.attention=mha(heads=2)"};
}

inline std::filesystem::path tiny_lm_run(const std::string& prefix, const std::string& name) {
  const std::filesystem::path dir = fresh_run_dir(prefix, name);
  std::string console;
  const int status = run_catalog("lm", dir, tiny_lm_sets(), {}, &console);
  REQUIRE_MESSAGE(status == 0, console);
  return dir;
}

// config.toml with `from` replaced by `to` (once).
inline void edit_config(const std::filesystem::path& dir, const std::string& from, const std::string& to) {
  std::string text = slurp(dir / "config.toml");
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  std::ofstream(dir / "config.toml") << text;
}

}  // namespace attnlab::testing

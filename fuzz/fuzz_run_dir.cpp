// Fuzz target: the files of a run directory as the commands read them back (docs/io.md, "Files
// read whole"; docs/experiments.md, "The run directory"). The input holds the files one after
// another, each opened by a line "==> NAME <==" (NAME one of config.toml, summary.json,
// metrics.jsonl, meta.json, point.json, failure.json; text before the first such line is
// ignored). They are written into a fresh directory, which is then read as `attnlab report`
// reads a run (read_run_dir: summary.json, config.toml, metrics.jsonl, point.json), as a resume
// reads it (append_meta_session on meta.json; a RunContext of the lm experiment, which drops and
// logs the metrics.jsonl lines it cannot keep) and as `attnlab sweep` reads a failed run
// (failure_message). Identity checked: a resumed context keeps only metrics lines that parse as
// JSON objects with an integer "step".
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "experiments/runner/experiment.hpp"
#include "experiments/runner/store.hpp"
#include "fuzz/fuzz_common.hpp"
#include "tensor/io.hpp"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

const char* const kFiles[] = {"config.toml", "summary.json", "metrics.jsonl", "meta.json", "point.json", "failure.json"};

std::map<std::string, std::string> split_files(std::string_view text) {
  std::map<std::string, std::string> files;
  std::string* current = nullptr;
  size_t at = 0;
  while (at < text.size()) {
    const size_t eol = text.find('\n', at);
    const std::string_view line = text.substr(at, eol == std::string_view::npos ? std::string_view::npos : eol - at);
    at = eol == std::string_view::npos ? text.size() : eol + 1;
    if (line.starts_with("==> ") && line.ends_with(" <==")) {
      const std::string name(line.substr(4, line.size() - 8));
      current = nullptr;
      for (const char* f : kFiles)
        if (name == f) current = &files[name];
      continue;
    }
    if (current) *current += std::string(line) + (eol == std::string_view::npos ? "" : "\n");
  }
  return files;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path dir = fs::path(fuzz::write_temp("run_dir.marker", "")).parent_path() / "run";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  for (const auto& [name, text] : split_files(fuzz::as_text(data, size))) std::ofstream(dir / name, std::ios::binary) << text;
  fuzz::guarded("fuzz_run_dir", [&] { runner::read_run_dir(1, dir); });
  fuzz::guarded("fuzz_run_dir", [&] { runner::run_start_time(dir); });
  fuzz::guarded("fuzz_run_dir", [&] { runner::failure_message(dir); });
  fuzz::guarded("fuzz_run_dir", [&] {
    if (fs::exists(dir / "meta.json"))
      runner::append_meta_session(read_text((dir / "meta.json").string()), "meta.json", "2026-01-01T00:00:00Z", 1);
  });
  fuzz::guarded("fuzz_run_dir", [&] {
    runner::RunContext ctx(runner::Config(runner::find_experiment("lm").schema), dir, {});
    if (!fs::exists(dir / "metrics.jsonl")) return;
    std::istringstream kept(read_text((dir / "metrics.jsonl").string()));
    for (std::string line; std::getline(kept, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      fuzz::require(!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer(),
                    "fuzz_run_dir", "a resumed context kept a metrics line that is not a metrics object: " + line);
    }
  });
  return 0;
}

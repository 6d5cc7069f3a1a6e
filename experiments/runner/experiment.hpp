// Experiments as C++ functions, and the run context they receive (docs/experiments.md).
//
// An experiment is one file in experiments/catalog/ with one registration line:
//
//   static const bool registered = runner::register_experiment({
//       .name = "my_experiment",
//       .description = "what it measures",
//       .schema = Schema().add("train.steps", 200, "optimizer steps") ...,
//       .presets = {{"quick", "train.steps = 200"}, {"full", "train.steps = 5000"}},
//       .run = [](const Config& config, RunContext& ctx) { ... ctx.summary("acc", acc); },
//   });
//
// experiments/catalog/*.cpp are compiled into the attnlab executable and the test binaries as
// object files (never through a static archive, whose unreferenced objects the linker would drop
// together with their registration).
//
// Every schema gets a `seed` key (int, default 0) added by register_experiment.
//
// ## The run directory (what `attnlab run EXP --run-dir DIR` leaves; the sweep relies on it)
//   config.toml         the resolved config (Config::to_toml); written before the run starts
//   meta.json           experiment, preset, command line, git commit and dirty flag, hostname,
//                       CPU model, thread count, attnlab version, start time (ISO 8601 UTC)
//   log.txt             the run's log lines (also on stderr)
//   metrics.jsonl       one JSON object per line: {"step": 120, "time": 3.5, "train_loss": 2.1}
//                       ("time" = seconds of training so far, resumed runs included); on resume,
//                       lines with a step above the checkpoint's are dropped (rewritten atomically)
//                       so no step is ever recorded twice
//   checkpoint.safetensors  the latest checkpoint (atomic rename; metadata "step")
//   summary.json        written atomically last; its presence means the run is complete:
//                       {"experiment": ..., "status": "complete", "steps": N, "seconds": s,
//                        "peak_rss_mb": m, "metrics": {"val_acc": 0.61, ...}}
//   artifacts/          anything else an experiment writes (ctx.artifact_path)
// Exit status of `attnlab run`: 0 complete, 1 failed, 2 usage error, 3 stopped by a signal
// (SIGINT/SIGTERM) after saving a checkpoint: run the same command again to continue.
// Re-running in a directory that holds a complete run does nothing and exits 0; in one with an
// unfinished run it resumes from checkpoint.safetensors if config.toml is equal to the newly
// resolved config, and otherwise fails with an error that names the first differing key.
#pragma once
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "experiments/runner/config.hpp"
#include "tensor/io.hpp"
#include "tensor/random.hpp"

namespace attnlab::runner {

class RunContext;
struct TaskData;

struct Experiment {
  std::string name;
  std::string description;
  Schema schema;
  std::map<std::string, std::string> presets;  // preset name -> TOML overrides
  std::function<void(const Config&, RunContext&)> run;
};

// Adds `e` to the registry (adding `seed`); returns true. A duplicate name is a ValueError.
bool register_experiment(Experiment e);
// Every registered experiment, by name.
std::vector<const Experiment*> experiments();
// ValueError listing the known names when `name` is not registered.
const Experiment& find_experiment(const std::string& name);

class RunContext {
 public:
  const Config& config() const;
  const std::filesystem::path& dir() const;
  // Seeded from the config's `seed`; restored from the checkpoint on resume.
  Generator& generator();

  // A log line (log.txt and stderr; on a TTY it does not break the progress bar).
  void log(const std::string& line);
  template <class... A>
  void logf(fmt::format_string<A...> f, A&&... args) {
    log(fmt::format(f, std::forward<A>(args)...));
  }

  // One line of metrics.jsonl at `step`; "time" is added.
  void metrics(int64_t step, const std::map<std::string, double>& values);
  // A final metric for summary.json (the last value set wins).
  void summary(const std::string& name, double value);

  // Progress: on a TTY one redrawn line (step/total, loss, steps/s, ETA); otherwise a plain log
  // line at most every 10 seconds and at the end.
  void progress(int64_t step, int64_t total, double loss);

  // Checkpoints: `state` is every tensor needed to continue (model, optimizer, loader state, ...).
  // Saving is atomic. load_checkpoint returns the step and tensors of the last save, or nothing
  // for a fresh run.
  void save_checkpoint(int64_t step, const TensorMap& state);
  std::optional<std::pair<int64_t, TensorMap>> load_checkpoint() const;

  // True once SIGINT or SIGTERM arrived: save a checkpoint and return from the experiment.
  bool should_stop() const;

  // The task's data, built once from the config's task.* keys (experiments/runner/task.hpp).
  // ConfigError when the experiment's schema has no `task.name`.
  const TaskData& data();

  // dir()/artifacts/<name>, its folder created.
  std::filesystem::path artifact_path(const std::string& name) const;

  // ... implementation-defined members (the runner builds the context) ...
};

}  // namespace attnlab::runner

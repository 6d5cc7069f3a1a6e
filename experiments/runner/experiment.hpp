/// @file
/// Experiments as C++ functions, and the run context they receive (docs/experiments.md).
///
/// An experiment is one file in experiments/catalog/ with one registration line:
///
///   static const bool registered = runner::register_experiment({
///       .name = "my_experiment",
///       .description = "what it measures",
///       .schema = Schema().add("train.steps", 200, "optimizer steps") ...,
///       .presets = {{"quick", "train.steps = 200"}, {"full", "train.steps = 5000"}},
///       .run = [](const Config& config, RunContext& ctx) { ... ctx.summary("acc", acc); },
///   });
///
/// experiments/catalog/*.cpp form the catalog library, which attnlab::experiments links whole
/// (--whole-archive: a plain static archive would drop the unreferenced objects together with
/// their registration). An experiment of one's own repository registers the same way, in a
/// program linking attnlab::experiments (docs/experiments.md, "Experiments in one's own
/// repository").
///
/// Every schema gets a `seed` key (int, default 0) added by register_experiment.
///
/// ## The run directory (what `attnlab run EXP --run-dir DIR` leaves; the sweep relies on it)
///   config.toml         the resolved config (Config::to_toml); written before the run starts
///   meta.json           experiment, preset, command line, git commit and dirty flag, hostname,
///                       CPU model, thread count, MPI world size, attnlab version, start time
///                       (ISO 8601 UTC), and per process its start, threads and world size
///   log.txt             the run's log lines (also on stderr)
///   metrics.jsonl       one JSON object per line: {"step": 120, "time": 3.5, "train_loss": 2.1}
///                       ("time" = seconds of training so far, resumed runs included); on resume,
///                       lines with a step above the checkpoint's are dropped (rewritten atomically)
///                       so no step is ever recorded twice
///   checkpoint.safetensors  the latest checkpoint (atomic rename; metadata "step")
///   summary.json        written atomically last; its presence means the run is complete:
///                       {"experiment": ..., "status": "complete", "steps": N, "seconds": s,
///                        "peak_rss_mb": m, "metrics": {"val_acc": 0.61, ...}}
///   artifacts/          anything else an experiment writes (ctx.artifact_path)
///   failure.json        written atomically when the experiment throws (summary.json is then not
///                       written): {"experiment": ..., "status": "failed", "error": "<message>",
///                       "step": last step seen, "seconds": s}; removed when the run is resumed
/// Exit status of `attnlab run`: 0 complete, 1 failed, 2 usage error, 3 stopped by a signal
/// (SIGINT/SIGTERM) after saving a checkpoint: run the same command again to continue.
///
/// Before anything is created the whole config is validated: every key against the schema
/// (resolve_config) and the experiment's own check (Experiment::check: the catalog parses the
/// attention spec and builds a transformer block, so a bad spec or shape is a usage error). Then
/// the run directory decides:
///   absent, empty, or only a sweep's files   a fresh run
///   config.toml equal to the resolved config  summary.json present: nothing to do (exit 0);
///                                            otherwise resume from checkpoint.safetensors
///   config.toml of another config            exit 2, naming every differing key with its old and
///                                            new value (complete or unfinished alike)
///   anything else (no config.toml)           exit 2: not a run directory
/// With `force`, a directory holding a run (any config, complete or not) is renamed to
/// DIR.old-N (the smallest free N; the new name is printed) and the run starts afresh; nothing is
/// deleted. A directory that is not a run directory stays an error.
/// @ingroup runner
#pragma once
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "experiments/runner/config.hpp"
#include "tensor/io.hpp"
#include "tensor/random.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

class RunContext;
struct TaskData;

/// An experiment: a name, a config schema, presets and the function that runs it (see the file's description).
struct Experiment {
  std::string name;  ///< `attnlab run NAME`
  std::string description;  ///< one line for `attnlab list`
  Schema schema;  ///< the config keys it reads (register_experiment adds `seed`)
  std::map<std::string, std::string> presets;  ///< preset name -> TOML overrides
  std::function<void(const Config&, RunContext&)> run;  ///< trains and reports through the RunContext
  /// Optional: validates a resolved config before the run directory is created (ConfigError or
  /// another Error for a config the run would reject). Must not depend on the run directory or on
  /// `seed` (the sweep checks each config once for all its seeds).
  std::function<void(const Config&)> check = {};
};

/// Adds `e` to the registry (adding `seed`); returns true. Registrations run in static
/// initialisers, where a throw would end the program before main, so a bad one does not throw: an
/// experiment without a name or run function, with a name already taken (the first registration
/// stays), with a bad schema (Schema::error) or a `seed` that is not an int is left out, and the
/// message naming it is kept in registration_errors(); returns false. attnlab::cli::main refuses
/// to run while there is one, and find_experiment of a refused name fails with its message.
bool register_experiment(Experiment e);
/// The messages of refused registrations, in order, e.g. "register_experiment: experiment 'lm' is
/// registered twice (the first registration is kept)".
const std::vector<std::string>& registration_errors();
/// Forgets them (tests that register bad experiments on purpose).
void clear_registration_errors();
/// Every registered experiment, by name.
std::vector<const Experiment*> experiments();
/// ValueError listing the known names when `name` is not registered (with the registration's
/// message when `name` was refused).
const Experiment& find_experiment(const std::string& name);

/// What `attnlab run` resolves and runs (experiments/cli/run.cpp).
struct RunRequest {
  std::string experiment;  ///< the registered experiment's name
  std::string preset;                 ///< "" = none
  std::string config_file;            ///< "" = none
  std::vector<std::string> sets;      ///< "key=value", in order
  std::filesystem::path run_dir;  ///< the run directory
  std::string command_line;           ///< recorded in meta.json
  bool force = false;                 ///< set an existing run aside (DIR.old-N) and start afresh
  bool wait = false;                  ///< another process holds run_dir: wait (else fail at once)
};

/// Exit statuses of `attnlab run` (see above).
enum ExitStatus : int { kExitComplete = 0, kExitFailed = 1, kExitUsage = 2, kExitStopped = 3 };

/// schema defaults < preset < config_file < sets. ValueError for an unknown preset (listing the
/// experiment's presets), ConfigError / FileError from the sources.
Config resolve_config(const Experiment& e, const std::string& preset, const std::string& config_file,
                      const std::vector<std::string>& sets);

/// Runs (or resumes, or skips) one experiment in request.run_dir as described above, catching
/// every error: messages go to `console` prefixed "attnlab run: ". `tty` selects the redrawn
/// progress line. Installs SIGINT/SIGTERM handlers for the duration of the run (a second signal
/// kills the process). Returns an ExitStatus.
int run_experiment(const RunRequest& request, std::ostream& console, bool tty);

/// The "error" of dir/failure.json; "" when the file is absent or unreadable.
std::string failure_message(const std::filesystem::path& run_dir);

/// What append_meta_session returns: the new meta.json and a warning.
struct MetaSession {
  std::string text;     ///< the new meta.json
  std::string warning;  ///< "" when the thread count and the number of ranks are unchanged
};
/// A resumed process recorded as a segment in a run's meta.json: `text` is the file's content, `path` names it
/// in errors. Appends `now` to "resumed_at" and {start: now, threads} to "segments" (a file without
/// segments gets its first segment from "start_time" and "threads"); `warning` is set when the
/// previous process ran with another thread count or number of MPI ranks. FileError naming the path when the text is not
/// a JSON object or "resumed_at" / "segments" is not a list.
MetaSession append_meta_session(const std::string& text, const std::string& path, const std::string& now, int threads,
                                int world_size = 1);

/// `attnlab run --dry-run`: resolves and validates the config as run_experiment does, writes it
/// to `out` as TOML (usable as a --config file) and tells `console` what a run would do with
/// request.run_dir (fresh, resume, nothing to do, set aside with --force, or refuse). Then it runs
/// the experiment in a dry RunContext (RunContext::Options::dry_run), which stops it before its
/// first step: everything the run checks before training (the task's data, the model, the
/// checkpoint a resume would read, train.init_from, train.groups, the optimizer's keys) is checked
/// by the same code, and an error is reported with the run's message. Creates and changes nothing.
/// Returns the exit status the run would start with: 0, or kExitUsage.
int dry_run_experiment(const RunRequest& request, std::ostream& out, std::ostream& console);

/// The config checks run before anything is created, shared by run, run --dry-run and the sweep's
/// validation: the experiment's own check (Experiment::check) and the split of train.batch_size
/// into `world_size` x train.accumulate micro-batches.
void check_config(const Experiment& e, const Config& config, int world_size);

/// The rule for a run directory's path (docs/experiments.md, "The run directory"), checked by run
/// and run --dry-run before anything is created: not empty, valid UTF-8 (it is recorded in
/// meta.json, a JSON file), and creatable (its nearest existing ancestor is a directory this
/// process may write). ConfigError naming --run-dir, the path and the defect.
void check_run_dir_path(const std::filesystem::path& dir);

/// Thrown by stop_point(): a stop signal arrived during an evaluation. The Trainer catches it
/// (saving the checkpoint of the step just trained) and so does run_experiment (exit status 3);
/// an experiment lets it pass.
struct RunStopped : std::exception {
  const char* what() const noexcept override { return "stopped by a signal"; }
};
/// Called between the batches of an evaluation: throws RunStopped once SIGINT or SIGTERM arrived
/// in a single-process run, so that a stop signal is honoured during evaluation as during
/// training. Under mpirun it does nothing: the ranks agree on a stop at the next step instead.
void stop_point();

/// The step of a run's checkpoint file, checked as a resume checks it (and analyze, viz and
/// generate, which read the same file): the metadata "step", a non-negative integer, equal to the
/// run.step and trainer.step tensors where the file has them. FileError naming the file and the
/// disagreeing values ("the file is damaged or edited") otherwise.
int64_t checkpoint_step(const std::filesystem::path& file, const Metadata& meta, const TensorMap& tensors);

class RunContext {
 public:
  /// Where the console output goes and how progress is shown.
  struct Options {
    std::ostream* console = nullptr;  ///< log lines and progress also go here (nullptr: log.txt only)
    bool tty = false;                 ///< redraw one progress line instead of periodic log lines
    double progress_interval = 10;    ///< seconds between plain progress lines
    /// A dry run (dry_run_experiment): nothing is created or written (no directory, log.txt,
    /// metrics, checkpoint, summary or artifact), the checkpoint the run would resume from is
    /// read and checked when dry_run_resumes, and Trainer::fit returns (false) before the first
    /// step, after every check the run makes before it.
    bool dry_run = false;
    bool dry_run_resumes = false;
  };
  /// Built by run_experiment; tests may build one directly. Creates `dir`; when it holds
  /// checkpoint.safetensors, restores the generator, the training time and the peak RSS from it
  /// and drops metrics.jsonl lines with a step above the checkpoint's (all of them when there is
  /// no checkpoint). On MPI ranks other than 0 (dist::rank() > 0) it neither reads nor writes
  /// `dir`: logs go to the console only, metrics, checkpoints and the summary nowhere, artifacts
  /// to a scratch folder, and load_checkpoint returns nothing (the Trainer broadcasts rank 0's).
  RunContext(Config config, std::filesystem::path dir, Options options);
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  const Config& config() const;  ///< the resolved config
  const std::filesystem::path& dir() const;  ///< the run directory
  /// Seeded from the config's `seed`; restored from the checkpoint on resume.
  Generator& generator();

  /// A log line (log.txt and stderr; on a TTY it does not break the progress bar).
  void log(const std::string& line);
  /// log() of an fmt-formatted line.
  template <class... A>
  void logf(fmt::format_string<A...> f, A&&... args) {
    log(fmt::format(f, std::forward<A>(args)...));
  }

  /// One line of metrics.jsonl at `step`; "time" is added.
  void metrics(int64_t step, const std::map<std::string, double>& values);
  /// A final metric for summary.json (the last value set wins).
  void summary(const std::string& name, double value);

  /// Progress: on a TTY one redrawn line (step/total, loss, steps/s, ETA); otherwise a plain log
  /// line at most every 10 seconds and at the end.
  void progress(int64_t step, int64_t total, double loss);

  /// Checkpoints: `state` is every tensor needed to continue (model, optimizer, loader state, ...).
  /// Saving is atomic. load_checkpoint returns the step and tensors of the last save, or nothing
  /// for a fresh run.
  void save_checkpoint(int64_t step, const TensorMap& state);
  std::optional<std::pair<int64_t, TensorMap>> load_checkpoint() const;  ///< the last checkpoint's step and tensors, or nothing (see save_checkpoint)

  /// True once SIGINT or SIGTERM arrived: save a checkpoint and return from the experiment.
  bool should_stop() const;
  /// Options::dry_run.
  bool dry_run() const { return options_.dry_run; }

  /// The task's data, built once from the config's task.* keys (experiments/runner/task.hpp).
  /// ConfigError when the experiment's schema has no `task.name`.
  const TaskData& data();

  /// `dir()/artifacts/<name>`, its folder created.
  std::filesystem::path artifact_path(const std::string& name) const;

  /// As if a signal had arrived (tests, or an experiment that wants to stop early and resume).
  void request_stop();
  /// Seconds of training so far, resumed processes included (the "time" of metrics lines).
  double seconds() const;
  /// The largest step seen by metrics, progress or save_checkpoint (or restored), -1 if none.
  int64_t last_step() const { return last_step_; }
  const std::map<std::string, double>& summaries() const { return summary_; }  ///< the final metrics set so far with summary()
  /// Writes summary.json (status "complete"); run_experiment calls it after a normal return.
  void write_summary(const std::string& experiment);

 private:
  void emit(const std::string& line);  ///< log.txt + console, keeping a TTY progress line intact
  Config config_;
  std::filesystem::path dir_;
  Options options_;
  Generator generator_;
  std::unique_ptr<TaskData> data_;
  std::map<std::string, double> summary_;
  mutable std::optional<std::pair<int64_t, TensorMap>> checkpoint_;  ///< read at construction
  bool stop_requested_ = false;
  int64_t last_step_ = -1;
  double time_offset_ = 0;      ///< training seconds of earlier processes
  double peak_rss_offset_ = 0;  ///< peak RSS (MB) of earlier processes
  double start_ = 0;            ///< monotonic seconds when this process began the run
  double last_progress_ = -1e30;
  int64_t progress_first_step_ = -1;
  double progress_first_time_ = 0;
  std::string progress_line_;   ///< what the TTY line shows
  bool writer_;                 ///< rank 0: the one process that writes the run directory
};

/// Peak resident set size of this process in MB (VmHWM of /proc/self/status; 0 if unknown).
double peak_rss_mb();
/// The standard output of a shell command, trailing newlines removed; nullopt when it cannot be
/// started or exits non-zero.
std::optional<std::string> command_output(const std::string& cmd);

}  // namespace attnlab::runner
/// @}

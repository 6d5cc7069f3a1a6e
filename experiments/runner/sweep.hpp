/// @file
/// Sweeps: one TOML file names an experiment and the config values to vary; the sweep expands it
/// into numbered runs, runs them as `attnlab run` child processes, and keeps their results in
/// DIR/results.sqlite (docs/sweeps.md).
///
///   experiment = "classify"
///   preset = "quick"                 # optional
///   workers = 2                      # optional (default 1); each run gets cores / workers threads
///   seeds = [0, 1, 2]                # an axis on `seed` (default [0])
///   [set]                            # overrides common to every run
///   "task.name" = "listops"
///   [grid]                           # cartesian product over every key's list
///   "model.attention" = ["mha(heads=4)", "local(window=16)"]
///   [zip]                            # equal-length lists varied together: one axis
///   "model.heads" = [2, 4, 8]
///   "model.key_size" = [32, 16, 8]
///   [report]                         # read by `attnlab report` (experiments/runner/report.hpp)
///   metric = "val_acc"
///   baseline = { "model.attention" = "mha(heads=4)" }   # optional: paired differences against it
///   [[report.expect]]                # optional, repeated: an outcome declared before the run
///   name = "local matches mha"
///   a = { "model.attention" = "local(window=16)" }
///   b = { "model.attention" = "mha(heads=4)" }
///   relation = "equal"               # better | equal (with margin) | below | above (with value, no b)
///   margin = 0.01
///   minus = "acc_random"             # optional: judge metric - minus per run (two metrics of a run)
///
/// Expansion order, which fixes the run numbers: the zip axis outermost, then the grid keys in the
/// order the file lists them (the last one varies fastest), then the seeds innermost, so the seeds
/// of one configuration are neighbours. A run's point is its value on every axis, seed last.
///
/// The sweep directory DIR (default sweeps/<file stem>):
///   sweep.toml            a copy of the sweep file; running another file into DIR is an error
///   runs/0003/            one run: point.json (its axis values) + what `attnlab run` writes
///   results.sqlite        the results store (experiments/runner/store.hpp), results.csv
///   shards/shard-i-of-N.sqlite  the store of `--shard i/N` (one file per shard, never shared)
/// Every run directory is the truth and the database is derived from it: a run is complete when
/// its summary.json exists, and a complete run missing from the store is added at the next sweep
/// start, so killing the sweep at any moment (even kill -9) loses nothing: run the same command
/// again and complete runs are skipped while unfinished ones resume from their checkpoints.
/// @ingroup runner
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "experiments/runner/config.hpp"
#include "experiments/runner/stats.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// A sweep file that does not parse, has an unknown key, an empty or unequal list, an axis the
/// experiment does not have, or differs from the copy already in the sweep directory. The message
/// starts with "FILE:LINE:" where a line is known.
struct SweepError : ConfigError {
  using ConfigError::ConfigError;
};

/// A sweep file that would renumber or change a run its sweep directory already numbers: a run
/// no longer in the file, a run whose config differs, another experiment or other axes. The
/// message names the run and what differs. `attnlab sweep` exits with kExitSweepConflict.
struct SweepConflictError : SweepError {
  using SweepError::SweepError;
};
/// The exit status of `attnlab sweep` (and `--dry-run`, `--emit-slurm`) on a SweepConflictError.
inline constexpr int kExitSweepConflict = 4;

/// One varied key and its values, in file order; `line` is where the key is written.
struct Axis {
  std::string key;            ///< a config key
  std::vector<Value> values;  ///< its values, in file order
  int line = 0;               ///< where the key is written
};

/// One `[set]` entry: a key, its value and the line it is written on.
struct Assignment {
  std::string key;  ///< a config key
  Value value;      ///< its value, typed as the file writes it
  int line = 0;     ///< where the entry is written
};

/// The [report] table: what `attnlab report` tabulates and plots.
struct ReportSpec {
  std::string metric;               ///< headline metric; empty = headline_metric's choice
  bool ascending = false;           ///< sort = "asc": lower is better (losses, bits per character)
  bool sort_given = false;          ///< without `sort`, lower_is_better(headline) decides
  std::string x;                    ///< optional: the headline metric against this swept key
  std::vector<std::string> curves;  ///< metrics.jsonl columns drawn as training curves
  /// bubble = { x = ..., y = ..., size = ..., label = ... }: a bubble chart of the configurations.
  struct Bubble {
    std::string x;      ///< the metric (or config key) across
    std::string y;      ///< the metric (or config key) up
    std::string size;   ///< the metric (or config key) a bubble's area shows
    std::string label;  ///< a key naming each bubble
  };
  bool has_bubble = false;  ///< whether [report] has a bubble table
  Bubble bubble;            ///< the bubble chart, when has_bubble
  /// measured = { file = "...", key = "model.attention" }: a CSV of figures measured outside the
  /// sweep joined to every run by the run's value of `key` (experiments/runner/measured.hpp).
  struct Measured {
    std::string file;  ///< relative to the working directory of `attnlab report`
    std::string key;   ///< a swept key
  };
  bool has_measured = false;  ///< whether [report] has a measured table
  Measured measured;          ///< the measured figures, when has_measured
  /// A configuration named by some of its axis values: { "model.key_size" = 16 }.
  using Selector = std::vector<std::pair<std::string, Value>>;
  Selector baseline;  ///< optional: every other configuration's paired difference against this one
  /// [[report.expect]]: an outcome declared before the runs, judged by `attnlab report`
  /// (experiments/runner/stats.hpp has the relations and verdicts).
  struct Expectation {
    std::string name;    ///< what is claimed, in words
    std::string metric;  ///< default: `metric` above
    std::string minus;   ///< optional: judge metric - minus of each run (two metrics of one run)
    Selector a;          ///< the configuration judged; empty: the sweep's only configuration
    Selector b;          ///< the one it is compared with (better / equal only)
    Relation relation = Relation::Better;  ///< better, equal, below or above
    double margin = 0;   ///< equal: |a - b| <= margin
    double value = 0;    ///< below / above: the threshold
    int line = 0;        ///< where the expectation starts in the file
  };
  std::vector<Expectation> expect;  ///< in file order
};

/// A parsed sweep file (see the file's description).
struct SweepSpec {
  std::string path;        ///< the sweep file, for messages
  std::string text;        ///< its content, copied to DIR/sweep.toml
  std::string experiment;  ///< the registered experiment every run runs
  std::string preset;      ///< "" = none
  int workers = 1;         ///< runs at a time
  std::vector<Assignment> set;    ///< [set]: overrides common to every run
  std::vector<Axis> grid;         ///< [grid]: the cartesian product's axes, in file order
  std::vector<Axis> zip;          ///< [zip]: keys varied together (one axis)
  std::vector<int64_t> seeds = {0};  ///< the `seed` axis
  int seeds_line = 0;             ///< where `seeds` is written (0: not written)
  ReportSpec report;              ///< [report]
};

/// The most runs a sweep file may name (seeds x zip length x every grid list's length): a few
/// lines of lists can name more runs than memory holds.
inline constexpr size_t kMaxSweepRuns = 100000;

/// Parses a sweep file's text; `path` names it in errors. Checks the file's own structure (not yet
/// the experiment's schema: see validate_sweep), and the number of runs (kMaxSweepRuns).
SweepSpec parse_sweep(const std::string& text, const std::string& path);
SweepSpec load_sweep(const std::string& path);  ///< FileError when unreadable

/// One run's value on every axis, in axis order (zip keys, grid keys, then "seed").
using Point = std::vector<std::pair<std::string, Value>>;
/// Every run's point, in expansion order (see the file's description).
std::vector<Point> expand_sweep(const SweepSpec& spec);
/// The axis keys, in the order of a Point (the same for every run).
std::vector<std::string> axis_keys(const SweepSpec& spec);
/// {"model.attention": "mha(heads=4)", "seed": 0}, keys in axis order.
std::string point_to_json(const Point& point);
/// "model.attention=mha(heads=4), seed=0"
std::string point_label(const Point& point);

/// The run's config as `attnlab run` will resolve it: schema defaults < preset < [set] < point.
/// ConfigError naming the sweep file and line of the offending key.
Config resolve_run_config(const SweepSpec& spec, const Point& point);
/// Resolves every run's config before anything is launched; the first error is thrown. Where the
/// experiment has `model.attention` and `model.d_model`, each distinct pair is also built once
/// (nn::make_attention), so an unknown variant or option fails here rather than in a run; then
/// every run's config goes through the experiment's check (Experiment::check), as `attnlab run`
/// does before it creates a run directory. Checks that need the sequence length (a block size
/// dividing N) still happen when the run starts.
void validate_sweep(const SweepSpec& spec, const std::vector<Point>& points);

/// The runs of a sweep in the numbering of its directory DIR. A sweep file may grow: runs are
/// compared by their points (axis values) and resolved configs, not by the file's bytes.
///   DIR without sweep.toml: expand_sweep(spec), `fresh`.
///   Otherwise every run DIR numbers (DIR/sweep.runs.jsonl, else the expansion of DIR/sweep.toml)
///   keeps its number, and the points of `spec` that are new (appended configurations or seeds)
///   follow in expansion order (`added`). Comments, [report] and `workers` may change freely.
/// SweepConflictError (naming the run and the keys that differ) when `spec` names another
/// experiment or other axes, leaves out a run DIR numbers, or resolves a numbered run to another
/// config (a changed [set], preset or axis value). `points` is expand_sweep(spec).
struct SweepPlan {
  std::vector<Point> points;  ///< every run, in run order
  bool fresh = false;         ///< DIR has no sweep.toml yet
  bool changed = false;       ///< DIR/sweep.toml differs from the file (to be rewritten)
  size_t added = 0;           ///< runs new to DIR, at the end of `points`
};
/// The plan of `spec` against DIR, as described above.
SweepPlan plan_sweep(const SweepSpec& spec, const std::vector<Point>& points, const std::filesystem::path& dir);
/// Records a plan in DIR: DIR/sweep.runs.jsonl (one point per line, in run order) when the
/// numbering differs from the expansion, then DIR/sweep.toml (the file's text). Written in this
/// order, so an interrupted write never leaves a copy without its numbering.
void record_sweep_plan(const SweepSpec& spec, const SweepPlan& plan, const std::filesystem::path& dir);
/// The runs of a sweep copy in their numbering: `copy`'s run list (COPY_STEM.runs.jsonl beside
/// it) when it exists, else expand_sweep(spec). ValueError naming the list for a point `spec`
/// does not have.
std::vector<Point> numbered_points(const SweepSpec& spec, const std::filesystem::path& copy);

/// `attnlab sweep FILE --dry-run`: parses, expands and validates (validate_sweep) the file, plans
/// it against its sweep directory `dir` (empty: default_sweep_dir; plan_sweep, so a conflict
/// throws SweepConflictError as a real run would) and prints one line per run,
/// "0003  model.attention=mha(heads=4), seed=0" (", new" for a run the directory does not number
/// yet), launching and writing nothing. Errors throw as validate_sweep's do.
void dry_run_sweep(const std::string& sweep_file, std::ostream& out, const std::filesystem::path& dir = {});

/// The `attnlab run` arguments of one run (without the executable).
std::vector<std::string> run_arguments(const SweepSpec& spec, const Point& point, const std::filesystem::path& run_dir);

/// The metrics every run reports about its cost rather than its result: peak_rss_mb, seconds,
/// steps_per_s.
const std::set<std::string>& cost_metrics();
/// The sweep's headline metric among `metrics` (the names its runs report): [report] metric when
/// set, otherwise the first by name of the validation metrics (val_*), then of the test metrics
/// (test_*), then of any other that is neither a cost figure (peak_rss_mb, seconds, steps_per_s)
/// nor a count or training figure (params, train_*); "" when there is none. `attnlab report`
/// tabulates it first; `attnlab sweep` prints it for each run that completes.
std::string headline_metric(const ReportSpec& report, const std::set<std::string>& metrics);
/// Whether a lower value of `metric` is better, when [report] sort does not say: true for losses,
/// bits per character, perplexities and errors (a name containing "loss", "bpc", "ppl",
/// "perplexity" or "error"), false otherwise (accuracies).
bool lower_is_better(const std::string& metric);

/// What `attnlab sweep` prints when a run completes:
///   "done  0003 in 12.1 s: val_acc 0.8125 (3/8 to go, ETA 25 s)"
/// The ETA is the mean run time so far x the runs left (queued or running) / workers.
struct RunDone {
  std::string run;                       ///< "0003"
  double seconds = 0;                    ///< this run's wall time
  std::string metric;                    ///< headline_metric; "" leaves the metric out
  std::map<std::string, double> metrics;  ///< the run's final metrics
  size_t left = 0;                       ///< runs of this invocation not finished
  size_t total = 0;                      ///< runs of this invocation, queued in all
  double mean_seconds = 0;               ///< over the runs completed so far, this one included
  int workers = 1;                       ///< runs at a time
};
/// The line above for one completed run.
std::string done_line(const RunDone& done);
/// 42 s, 3.5 min, 2.1 h
std::string format_duration(double seconds);

/// "runs/0003"
std::string run_dir_name(int64_t index);
/// `sweeps/<stem of the sweep file>`
std::filesystem::path default_sweep_dir(const std::string& sweep_file);

/// How `attnlab sweep` runs a sweep file: its directory, workers, shard, cores and executable.
struct SweepOptions {
  std::string sweep_file;     ///< the sweep file's path
  std::filesystem::path dir;  ///< empty = default_sweep_dir(sweep_file)
  int workers = 0;            ///< 0 = the file's `workers`
  int shard = 0;              ///< run the runs with index % shards == shard
  int shards = 1;             ///< see shard
  std::string executable = "/proc/self/exe";  ///< the attnlab binary the runs are started with
  int cores = 0;              ///< 0 = the cores this process may run on
  bool wait = false;          ///< another process holds the directory (or shard): wait for it
};

/// Runs (or resumes) a sweep; progress lines go to `out`. Returns the exit status: 0 every run
/// complete, 1 some run failed (the others still ran), 3 stopped by SIGINT/SIGTERM (run the same
/// command again to continue). Errors in the sweep file throw before anything is launched.
int run_sweep(const SweepOptions& options, std::ostream& out);

/// What a Slurm job array script of a sweep holds; every path absolute.
struct SlurmScript {
  std::string sweep_file;  ///< absolute path of the sweep file
  std::string dir;         ///< absolute path of the sweep directory
  std::string executable;  ///< absolute path of the attnlab binary
  int shards = 1;          ///< array tasks, one shard each
  int cpus_per_task = 1;   ///< cores per task
  int signal_seconds = 120;  ///< SIGUSR1 this long before the time limit: stop, checkpoint, requeue
};

/// The bash script of a job array of `shards` tasks, task i running `attnlab sweep FILE --out DIR
/// --shard i/shards --workers 1 --cores C --wait` in the background and forwarding SIGTERM to it;
/// on SIGUSR1 it stops the sweep and requeues the task (docs/sweeps.md, "Scale-out").
/// ValueError for a directory an #SBATCH line cannot hold (a '"', '%' or newline in it).
std::string slurm_script(const SlurmScript& script);

/// Writes DIR/sweep.sbatch (slurm_script) after checking the sweep file. Returns the script's path.
std::filesystem::path emit_slurm(const SweepOptions& options, int shards, int cpus_per_task);

}  // namespace attnlab::runner
/// @}

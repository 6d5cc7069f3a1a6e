// `attnlab sweep`, `attnlab report` and `attnlab claims` (docs/sweeps.md): the command-line face of
// experiments/runner/sweep.hpp, report.hpp and claims.hpp.
#include "experiments/cli/sweep_commands.hpp"

#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>
#include <filesystem>
#include <memory>

#include "experiments/runner/claims.hpp"
#include "experiments/runner/program_name.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/sweep.hpp"

namespace attnlab::cli {
namespace fs = std::filesystem;
namespace {

// "i/N" with 0 <= i < N.
std::pair<int, int> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  int i = -1, n = 0;
  auto whole = [](const std::string& s, int& v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  if (slash == std::string::npos || !whole(text.substr(0, slash), i) || !whole(text.substr(slash + 1), n) || n < 1 ||
      i < 0 || i >= n)
    throw CLI::ValidationError("--shard", "must be i/N with 0 <= i < N (e.g. 0/4), got '" + text + "'");
  return {i, n};
}

struct SweepArgs {
  runner::SweepOptions options;
  std::string out, shard;
  bool emit_slurm = false, dry_run = false;
  int shards = 4, cpus_per_task = 2;
};

// `attnlab sweep` once its options are parsed: a dry run, a Slurm script, or the sweep itself.
void run_sweep_command(const SweepArgs& a, int& status) {
  const runner::SweepOptions& o = a.options;
  if (a.dry_run) {
    runner::dry_run_sweep(o.sweep_file, std::cout, o.dir);
    status = 0;
    return;
  }
  if (a.emit_slurm) {
    const auto path = runner::emit_slurm(o, a.shards, a.cpus_per_task);
    std::cout << "wrote " << path.string() << "\nsubmit it with:  sbatch " << path.string()
              << "\nthen, when every task has finished:  attnlab report "
              << (o.dir.empty() ? runner::default_sweep_dir(o.sweep_file) : o.dir).string() << "\n";
    status = 0;
    return;
  }
  status = runner::run_sweep(o, std::cout);
}

}  // namespace

void add_sweep_commands(CLI::App& app, int& status) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* sweep = app.add_subcommand(
      "sweep",
      "Run (or resume) every run of a sweep file: grid and zip axes over config keys, seeds as an axis, parallel "
      "workers. Results go to DIR/results.sqlite. Re-running the same command skips complete runs and resumes "
      "interrupted ones from their checkpoints. The file may grow: appended configurations and seeds run as new "
      "runs, [report] and comments may change; a change that would renumber or alter a run DIR holds is refused. "
      "Exit status: 0 all complete, 1 a run failed or the sweep file is invalid, 2 a command-line usage error, 3 "
      "stopped by a signal, 4 the file would renumber or change a run DIR holds (the message names the run and what "
      "differs).");
  sweep->add_option("SWEEP", a->options.sweep_file, "the sweep file (TOML; format in docs/sweeps.md)")
      ->required()
      ->check(CLI::ExistingFile);
  sweep->add_option("--out", a->out, "the sweep directory (default: sweeps/<sweep file stem>)");
  sweep->add_option("--workers", a->options.workers, "runs at a time, overriding the file's `workers` (each run gets "
                                                     "cores / workers threads)")
      ->check(CLI::Range(1, 1024));
  sweep->add_option("--cores", a->options.cores, "the cores the runs share (default: those this process may run "
                                                 "on; a Slurm task passes its --cpus-per-task)")
      ->check(CLI::Range(1, 1024));
  sweep->add_option("--shard", a->shard, "run only the runs with index % N == i, into DIR/shards/shard-i-of-N.sqlite "
                                         "(merge with `attnlab report DIR`)");
  sweep->add_flag("--wait", a->options.wait, "if another process holds the sweep directory, wait for it (default: "
                                            "fail at once naming its pid)");
  sweep->add_flag("--emit-slurm", a->emit_slurm, "write DIR/sweep.sbatch, a Slurm job array with one task per shard, "
                                                 "and run nothing");
  sweep->add_flag("--dry-run", a->dry_run, "list the runs (id and axis values) and validate every run's config, "
                                           "building its attention spec; launch nothing");
  sweep->add_option("--shards", a->shards, "with --emit-slurm: the number of array tasks (default 4)")
      ->check(CLI::Range(1, 100000));
  sweep->add_option("--cpus-per-task", a->cpus_per_task, "with --emit-slurm: cores per array task (default 2)")
      ->check(CLI::Range(1, 1024));
  sweep->callback([a, &status] {
    runner::SweepOptions& o = a->options;
    if (!a->shard.empty()) std::tie(o.shard, o.shards) = parse_shard(a->shard);  // checked in a dry run too
    if (!a->out.empty()) o.dir = a->out;
    try {
      run_sweep_command(*a, status);
    } catch (const runner::SweepConflictError& e) {
      std::cerr << runner::program_name() << " sweep: " << e.what() << "\n";
      status = runner::kExitSweepConflict;
    }
  });


  struct ReportArgs {
    std::vector<std::string> dirs;
    std::string out, metric;
  };
  auto r = std::make_shared<ReportArgs>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Merge a sweep directory's shard databases and run directories into DIR/results.sqlite, and write "
      "DIR/results.csv, DIR/report.md (final metrics, mean and 95% interval over seeds, paired differences against "
      "report.baseline, a verdict per [[report.expect]]) and SVG plots in DIR/plots/. Given run directories "
      "(attnlab run ... --run-dir) instead, compare them the same way: the config keys that differ between them "
      "are the configurations, seeds are grouped.");
  report->add_option("DIR", r->dirs, "a sweep directory (holding sweep.toml), or one or more run directories")
      ->required()
      ->check(CLI::ExistingDirectory);
  report->add_option("--out", r->out, "run directories: where report.md and plots/ go (default: PARENT/report, "
                                      "PARENT the first run directory's parent)");
  report->add_option("--metric", r->metric, "run directories: the headline metric (default: the first val_* metric, then test_*; losses and bpc sort lower-is-better)");
  report->callback([r, &status] {
    const fs::path first = r->dirs.front();
    if (r->dirs.size() == 1 && fs::exists(first / "sweep.toml")) {
      if (!r->out.empty() || !r->metric.empty())
        fail<ValueError>("report: --out and --metric are for run directories; a sweep's report goes to {} and its "
                         "metric is [report] metric in sweep.toml", first.string());
      runner::write_report(first, std::cout);
    } else {
      std::vector<fs::path> dirs(r->dirs.begin(), r->dirs.end());
      fs::path normal = fs::absolute(first).lexically_normal();
      if (!normal.has_filename()) normal = normal.parent_path();  // "runs/a/"
      const fs::path parent = normal.parent_path();
      runner::write_comparison(dirs, r->out.empty() ? parent / "report" : fs::path(r->out), r->metric, std::cout);
    }
    status = 0;
  });

  struct ClaimsArgs {
    std::string root = ".";
    bool write = false;
  };
  auto c = std::make_shared<ClaimsArgs>();
  CLI::App* claims = app.add_subcommand(
      "claims",
      "Derive the claims table from the studies' committed data (docs/results/*/claims.toml, their sweeps and "
      "results): each verdict by the rule of docs/experiments.md, each registration checked against git. Checks that "
      "docs/results/claims.csv, claims.md and the README's block are that table (exit 1 when not); --write writes "
      "them.");
  claims->add_option("--root", c->root, "the repository root (default: .)")->check(CLI::ExistingDirectory);
  claims->add_flag("--write", c->write, "write claims.csv, claims.md and the README block instead of checking them");
  claims->callback([c, &status] { status = runner::sync_claims(c->root, !c->write, std::cout) ? 0 : 1; });
}

}  // namespace attnlab::cli

// `attnlab run` and `attnlab list` (run.hpp): argument parsing only; the runner
// (experiments/runner/experiment.hpp) does the work.
#include "experiments/cli/run.hpp"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <vector>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "dist/distributed.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/task.hpp"

namespace attnlab::cli {

std::string default_run_dir(const std::string& experiment) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return "runs/" + experiment + "-" + buf;
}

namespace {

// Rows of cells as aligned columns: every column but the last padded to its widest cell, two
// spaces between columns, each line indented by two.
void print_columns(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c + 1 < row.size(); ++c) {
      if (width.size() <= c) width.resize(c + 1, 0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c)
      line += " " + (c + 1 < row.size() ? fmt::format("{:<{}} ", row[c], width[c]) : row[c]);
    out << line << "\n";
  }
}

}  // namespace

int run_list(const std::string& name, std::ostream& out, std::ostream& err) {
  if (!name.empty()) {
    const runner::Experiment* e = nullptr;
    try {
      e = &runner::find_experiment(name);
    } catch (const Error& ex) {
      err << program_name() << " list: " << ex.what() << "\n";
      return 2;
    }
    out << e->name << ": " << e->description << "\n\nkeys (default, type):\n";
    std::vector<std::vector<std::string>> keys;
    for (const auto& f : e->schema.fields())
      keys.push_back({f.key, runner::to_toml_value(f.value), runner::type_name(f.type), f.help});
    print_columns(keys, out);
    out << "\npresets:\n";
    for (const auto& [p, text] : e->presets) {
      out << "  " << p << ":";
      std::string line;
      for (char c : text) {
        if (c == '\n') {
          if (!line.empty()) out << "  " << line << ";";
          line.clear();
        } else {
          line += c;
        }
      }
      if (!line.empty()) out << "  " << line;
      out << "\n";
    }
    return 0;
  }
  out << "experiments (attnlab run NAME --preset P; attnlab list NAME for its keys):\n";
  std::vector<std::vector<std::string>> experiments, tasks;
  for (const auto* e : runner::experiments()) {
    std::string presets;
    for (const auto& [p, text] : e->presets) presets += (presets.empty() ? "" : ", ") + p;
    experiments.push_back({e->name, fmt::format("[presets: {}]", presets.empty() ? "none" : presets), e->description});
  }
  print_columns(experiments, out);
  out << "\ntasks (task.name = ...):\n";
  for (const auto& t : runner::tasks()) tasks.push_back({t.name, t.description});
  print_columns(tasks, out);
  return 0;
}

void add_run_command(CLI::App& app, int& status, const std::string& command_line) {
  auto* cmd = app.add_subcommand("run", "run (or resume) one experiment in a run directory");
  auto req = std::make_shared<runner::RunRequest>();
  req->command_line = command_line;
  auto run_dir = std::make_shared<std::string>();
  cmd->add_option("experiment", req->experiment, "experiment name (attnlab list)")->required();
  cmd->add_option("--preset", req->preset, "preset of the experiment, e.g. quick or full");
  cmd->add_option("--config", req->config_file, "TOML file of overrides (after the preset)");
  cmd->add_option("--set", req->sets, "KEY=VALUE override (after --config; repeatable)")
      ->allow_extra_args(false)  // one value per --set, so a later positional is not swallowed
      ->take_all();
  cmd->add_option("--run-dir", *run_dir, "run directory (default runs/<experiment>-<UTC time>)");
  cmd->add_flag("--force", req->force,
                "start afresh in a run directory that holds a run (complete or not, any config): the old "
                "directory is renamed to DIR.old-N, never deleted");
  auto dry_run = std::make_shared<bool>(false);
  cmd->add_flag("--dry-run", *dry_run,
                "validate the config (keys, values, attention spec, model shapes), print it as TOML on stdout "
                "and say what the run directory would see; create nothing");
  cmd->add_flag("--wait", req->wait, "if another process holds the run directory, wait for it (default: fail at once)");
  cmd->footer(
      "The config is validated before the run directory is created. A run directory holding the\n"
      "same config resumes (unfinished) or does nothing (complete); another config is refused with\n"
      "every differing key, unless --force.\n"
      "Exit status: 0 complete (or already complete), 1 failed, 2 usage error (bad key, value,\n"
      "preset, attention spec, or a run directory holding another config), 3 stopped by\n"
      "SIGINT/SIGTERM after saving a checkpoint: run the same command again to resume.\n"
      "Data-parallel: mpirun -np K attnlab run EXP ... (train.batch_size is the global batch;\n"
      "docs/distributed.md).");
  cmd->callback([req, run_dir, dry_run, &status] {
    req->run_dir = run_dir->empty() ? default_run_dir(req->experiment) : *run_dir;
    dist::Session mpi;  // under mpirun: one rank of a data-parallel run (docs/distributed.md)
    status = *dry_run ? runner::dry_run_experiment(*req, std::cout, std::cerr)
                      : runner::run_experiment(*req, std::cerr, isatty(2) != 0);
  });
}

void add_list_command(CLI::App& app, int& status) {
  auto* cmd = app.add_subcommand("list", "list experiments (with presets) and tasks, or one experiment's keys");
  auto name = std::make_shared<std::string>();
  cmd->add_option("experiment", *name, "show this experiment's config keys and presets");
  cmd->callback([name, &status] { status = run_list(*name, std::cout, std::cerr); });
}

}  // namespace attnlab::cli

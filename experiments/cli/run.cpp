// `attnlab run` and `attnlab list` (run.hpp): argument parsing only; the runner
// (experiments/runner/experiment.hpp) does the work.
#include "experiments/cli/run.hpp"

#include <unistd.h>

#include <ctime>
#include <iostream>

#include <fmt/format.h>

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

int run_list(const std::string& name, std::ostream& out, std::ostream& err) {
  if (!name.empty()) {
    const runner::Experiment* e = nullptr;
    try {
      e = &runner::find_experiment(name);
    } catch (const Error& ex) {
      err << "attnlab list: " << ex.what() << "\n";
      return 2;
    }
    out << e->name << ": " << e->description << "\n\nkeys (default, type):\n";
    for (const auto& f : e->schema.fields())
      out << fmt::format("  {:<22} {:<16} {:<7} {}\n", f.key, runner::to_toml_value(f.value),
                         runner::type_name(f.type), f.help);
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
  for (const auto* e : runner::experiments()) {
    std::string presets;
    for (const auto& [p, text] : e->presets) presets += (presets.empty() ? "" : ", ") + p;
    out << fmt::format("  {:<10} {}  [presets: {}]\n", e->name, e->description, presets.empty() ? "none" : presets);
  }
  out << "\ntasks (task.name = ...):\n";
  for (const auto& t : runner::tasks()) out << fmt::format("  {:<14} {}\n", t.name, t.description);
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
  cmd->add_flag("--wait", req->wait, "if another process holds the run directory, wait for it (default: fail at once)");
  cmd->footer(
      "Exit status: 0 complete (or already complete), 1 failed, 2 usage error (bad key, value,\n"
      "preset, or a run directory holding another config), 3 stopped by SIGINT/SIGTERM after\n"
      "saving a checkpoint: run the same command again to resume.");
  cmd->callback([req, run_dir, &status] {
    req->run_dir = run_dir->empty() ? default_run_dir(req->experiment) : *run_dir;
    status = runner::run_experiment(*req, std::cerr, isatty(2) != 0);
  });
}

void add_list_command(CLI::App& app, int& status) {
  auto* cmd = app.add_subcommand("list", "list experiments (with presets) and tasks, or one experiment's keys");
  auto name = std::make_shared<std::string>();
  cmd->add_option("experiment", *name, "show this experiment's config keys and presets");
  cmd->callback([name, &status] { status = run_list(*name, std::cout, std::cerr); });
}

}  // namespace attnlab::cli

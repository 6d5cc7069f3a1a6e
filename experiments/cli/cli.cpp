// The attnlab command-line tool as a library function, attnlab::cli::main (<attnlab/cli.hpp>): the
// attnlab executable's main calls it, and so can a user's own program (docs/experiments.md).
// CLI11 subcommands, one line each below. `run` and `list` (experiments/cli/run.hpp) drive the
// experiment runner; `sweep` and `report` (experiments/cli/sweep_commands.hpp, docs/sweeps.md) run
// many runs and summarise them; `analyze` and `viz` (experiments/cli/heads_commands.hpp) study a
// finished run's heads; `check` (experiments/cli/check.hpp) runs the conformance suite; `ngram`
// (experiments/cli/ngram.cpp) prints the n-gram calibration of the lm experiment's split; `demo`
// (the attention shoot-out of `make demo`), `variants`, `inspect`, `generate` and `explain`
// (experiments/cli/commands.hpp, docs/cli.md) are declared by their Command. Every error leaves
// through cli::exit_status, the one place that turns exceptions into messages and exit codes.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "attnlab.hpp"
#include "cli.hpp"
#include "experiments/cli/check.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/cli/run.hpp"
#include "experiments/cli/sweep_commands.hpp"
#include "experiments/runner/experiment.hpp"

namespace {

using namespace attnlab;

// Registrations that were refused (a name taken, a bad schema; experiment.hpp, registry.hpp): each
// message on stderr, and true, so that no command runs with a half-registered program.
bool report_refused_registrations() {
  std::vector<std::string> messages = runner::registration_errors();
  for (const auto& m : nn::variant_registration_errors()) messages.push_back(m);
  for (const auto& m : messages) std::fprintf(stderr, "%s: %s\n", cli::program_name().c_str(), m.c_str());
  return !messages.empty();
}

}  // namespace

int attnlab::cli::main(int argc, char** argv) {
  if (argc > 0) cli::set_program_name(argv[0]);
  if (report_refused_registrations()) return 2;
  const std::string& program = cli::program_name();
  CLI::App app{program == "attnlab" ? "attnlab: attention research on a from-scratch C++ autograd engine (docs/cli.md)"
                                    : program + ": attnlab's commands with this program's own variants and experiments "
                                                "(attnlab's docs/cli.md)",
               program};
  app.require_subcommand(1, 1);
  int status = 0;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  // One line per subcommand.
  cli::add_run_command(app, status, command_line);
  cli::add_list_command(app, status);
  cli::add_command(app, cli::kNGramCommand, status);
  cli::add_sweep_commands(app, status);  // sweep, report
  cli::add_analyze_command(app, status);
  cli::add_viz_command(app, status);
  cli::add_check_command(app, status);
  for (const cli::Command* c : cli::attention_commands()) cli::add_command(app, *c, status);  // demo, variants, ...
  app.add_subcommand("version", "print the version")->callback([&program] {
    std::puts(program == "attnlab" ? "attnlab 0.1.0" : (program + " (attnlab 0.1.0)").c_str());
  });
  cli::refuse_empty_values(app);

  try {
    app.parse(argc, argv);
    return status;
  } catch (...) {
    return cli::exit_status(&app, cli::selected_command(app), std::vector<std::string>(argv + std::min(argc, 2), argv + argc),
                            std::cout, std::cerr);
  }
}

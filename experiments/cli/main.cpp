// The attnlab command-line tool: CLI11 subcommands, one line each below. `run` and `list`
// (experiments/cli/run.hpp) drive the experiment runner; `sweep` and `report`
// (experiments/cli/sweep_commands.hpp, docs/sweeps.md) run many runs and summarise them; `analyze`
// and `viz` (experiments/cli/heads_commands.hpp) study a finished run's heads; `variants`, `inspect`
// and `generate` (experiments/cli/commands.hpp, docs/cli.md) parse their own arguments; `demo`
// (experiments/cli/demo.cpp) is the attention shoot-out of `make demo`.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "attnlab.hpp"
#include "experiments/cli/commands.hpp"
#include "experiments/cli/heads_commands.hpp"
#include "experiments/cli/run.hpp"
#include "experiments/cli/sweep_commands.hpp"

namespace {

using namespace attnlab;

// A subcommand whose arguments go unparsed to an existing run_* function (which has its own
// --help and error messages).
void add_forwarding(CLI::App& app, const char* name, const char* help, int& status,
                    int (*run)(const std::vector<std::string>&, std::ostream&, std::ostream&)) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->prefix_command();  // everything after the name is passed through
  cmd->set_help_flag();   // --help goes to the command itself
  cmd->callback([cmd, run, &status] { status = run(cmd->remaining(), std::cout, std::cerr); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnlab: attention research on a from-scratch C++ autograd engine (docs/cli.md)", "attnlab"};
  app.require_subcommand(1, 1);
  int status = 0;
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  // One line per subcommand.
  cli::add_run_command(app, status, command_line);
  cli::add_list_command(app, status);
  cli::add_sweep_commands(app, status);  // sweep, report
  cli::add_analyze_command(app, status);
  cli::add_viz_command(app, status);
  add_forwarding(app, "demo",
                 "the attention shoot-out: six variants trained on associative recall, results table and "
                 "report with a bubble chart (attnlab demo --help)", status, cli::run_demo);
  add_forwarding(app, "variants",
                 "list the attention variants and their options; --params SPEC --d-model D lists a "
                 "layer's parameters and buffers", status, cli::run_variants);
  add_forwarding(app, "inspect",
                 "run one attention layer on tensors from a safetensors file and write its output, "
                 "attention and gradients (attnlab inspect --help)", status, cli::run_inspect);
  add_forwarding(app, "generate", "sample text from a CausalLM checkpoint (attnlab generate --help)", status,
                 cli::run_generate);
  add_forwarding(app, "explain",
                 "print a variant's forward computation step by step: shapes, FLOPs, bytes, against "
                 "dense mha (attnlab explain --help)", status, cli::run_explain);
  app.add_subcommand("version", "print the version")->callback([] { std::puts("attnlab 0.1.0"); });

  try {
    app.parse(argc, argv);
    return status;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a hint
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attnlab: out of memory: a size asked for more memory than the machine can give\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnlab: %s\n", e.what());
    return 1;
  }
}

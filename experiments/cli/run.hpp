/// @file
/// `attnlab run` and `attnlab list` as CLI11 subcommands (docs/experiments.md). main.cpp adds them
/// with one line each; a subcommand's callback stores the exit status in `status`.
///   attnlab run EXPERIMENT [--preset P] [--config F] [--set K=V]... [--run-dir DIR] [--force] [--dry-run]
///   attnlab list [EXPERIMENT]
/// @ingroup cli
#pragma once
#include <ostream>
#include <string>

// CLI11 is included only by the .cpp files that declare options: it is the costliest header to
// compile (docs/testing.md, "Build time").
namespace CLI {
class App;
}

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// `command_line` is recorded in the run's meta.json.
void add_run_command(CLI::App& app, int& status, const std::string& command_line);
/// Adds `list` to the tool; its callback stores the exit status in `status`.
void add_list_command(CLI::App& app, int& status);

/// The listing of `attnlab list`: experiments with presets, then tasks; with a name, that
/// experiment's keys (default, type, help) and presets. Returns the exit status.
int run_list(const std::string& experiment, std::ostream& out, std::ostream& err);

/// `runs/<experiment>-<UTC time as YYYYMMDDTHHMMSSZ>`
std::string default_run_dir(const std::string& experiment);

}  // namespace attnlab::cli
/// @}

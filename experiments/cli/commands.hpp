/// @file
/// The attnlab CLI's attention and demo commands (docs/cli.md), each declared with CLI11 by a
/// CommandDefinition, so that main.cpp adds them as subcommands and tests run them directly with
/// argument vectors and string streams:
///   attnlab variants [NAME] [--params SPEC --d-model D]
///   attnlab inspect --spec SPEC --d-model D (--weights W | --init) --input X --out OUT ...
///   attnlab generate --checkpoint FILE [--prompt TEXT] [--tokens N] [--temperature T] ...
///   attnlab explain SPEC --d-model D (--seq N [--composed] [--causal] | --decode L) [--batch B]
///   attnlab demo [--out DIR] [--steps N] [--workers N] | --mlp   (the attention shoot-out)
///   attnlab ngram [--preset P] [--config F] [--set K=V]... [--csv FILE]   (the lm split's n-gram table)
/// Every command's exit status comes from one place, exit_status below: 0 success, 1 a failure
/// while running (bad spec, file, tensor name, shape or dtype), 2 a usage error (unknown or
/// missing option, unparsable or out-of-range value). Messages go to `err`, one line starting
/// with "attnlab <command>:" (the program's own name, program_name(), in a program of one's own).
/// @ingroup cli
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

// CLI11 is included only by the .cpp files that declare options: it is the costliest header to
// compile (docs/testing.md, "Build time").
namespace CLI {
class App;
class Validator;
}  // namespace CLI

#include "experiments/runner/program_name.hpp"
#include "tensor/error.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// A mistake in the command line itself (exit status 2), as opposed to a failure while running:
/// for the checks CLI11 cannot express (options that exclude each other, a range that depends on
/// a file's contents).
struct UsageError : ValueError {
  using ValueError::ValueError;
};

/// A command's body, run once its arguments are parsed; returns the exit status.
using CommandBody = std::function<int(std::ostream& out, std::ostream& err)>;

/// One subcommand of the tool: its name, its line of `attnlab --help`, and how it declares its options and runs.
struct Command {
  const char* name;     ///< `attnlab NAME`
  const char* summary;  ///< the line of `attnlab --help`
  /// Declares the command's positionals and options on `cmd` and returns the body that reads them.
  CommandBody (*define)(CLI::App& cmd);
};

extern const Command kVariantsCommand;  ///< `attnlab variants`
extern const Command kInspectCommand;   ///< `attnlab inspect`
extern const Command kGenerateCommand;  ///< `attnlab generate`
extern const Command kExplainCommand;   ///< `attnlab explain`
extern const Command kDemoCommand;      ///< `attnlab demo`
extern const Command kNGramCommand;     ///< `attnlab ngram`
/// The attention commands above, in the order of `attnlab --help` (ngram is added beside run and list).
const std::vector<const Command*>& attention_commands();

/// Adds `command` to `app` as a subcommand whose callback stores the body's exit status in
/// `status`; errors propagate out of app.parse, to exit_status.
void add_command(CLI::App& app, const Command& command, int& status);
/// Parses `args` (without the command's name) and runs the body: what `attnlab NAME args...` does.
int run_command(const Command& command, const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int run_variants(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);  ///< run_command(kVariantsCommand, ...)
int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);   ///< run_command(kInspectCommand, ...)
int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);  ///< run_command(kGenerateCommand, ...)
int run_explain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);   ///< run_command(kExplainCommand, ...)
int run_demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);      ///< run_command(kDemoCommand, ...)
int run_ngram(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);     ///< run_command(kNGramCommand, ...)

/// The shared exit-code block: called inside a catch handler, it prints the exception in flight
/// for `command` (run with `args`) and returns the exit status. --help (CLI::CallForHelp) prints
/// `app`'s help (that of the selected subcommand) on `out`: 0. CLI11 parse errors and UsageError:
/// 2, with a hint to --help. attnlab errors and other exceptions: 1. std::bad_alloc and the
/// std::invalid_argument / std::out_of_range of std::sto* never appear raw: the message says what
/// went wrong and repeats the command line being run. `app` may be null for a body run after parsing.
int exit_status(const CLI::App* app, const std::string& command, const std::vector<std::string>& args,
                std::ostream& out, std::ostream& err);

/// The program's name for help and error messages (experiments/runner/program_name.hpp).
using runner::program_name;
using runner::set_program_name;

/// The name of the subcommand `app` selected while parsing ("" when none was).
std::string selected_command(const CLI::App& app);

// ---- option checks shared by the commands ----

/// An integer in [lo, hi]; CLI11 names the option in the message ("--seq: must be in [1, 1048576],
/// got 0").
CLI::Validator int_range(int64_t lo, int64_t hi);
/// UsageError "{option}: must be in [lo, hi], got v" unless lo <= v <= hi (ranges known only after
/// parsing).
void check_range(const std::string& option, int64_t v, int64_t lo, int64_t hi);

/// The rule for empty values (docs/cli.md, "Options"): an option or positional given an empty
/// value (--shard "", --run-dir "") is a usage error naming it ("--run-dir: must not be empty"),
/// never read as "not given". Attached to every option of `app` and of its subcommands that takes
/// a value, except generate's --prompt (an empty prompt is text like any other).
void refuse_empty_values(CLI::App& app);

}  // namespace attnlab::cli
/// @}

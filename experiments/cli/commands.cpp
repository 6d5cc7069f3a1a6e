// The CLI11 plumbing of the commands in commands.hpp and the one exit-code block every attnlab
// command goes through (main.cpp calls exit_status too).
#include "experiments/cli/commands.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <iostream>
#include <new>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace attnlab::cli {


const std::vector<const Command*>& attention_commands() {
  static const std::vector<const Command*> all = {&kDemoCommand, &kVariantsCommand, &kInspectCommand, &kGenerateCommand,
                                                  &kExplainCommand};
  return all;
}

void add_command(CLI::App& app, const Command& command, int& status) {
  CLI::App* cmd = app.add_subcommand(command.name, command.summary);
  CommandBody body = command.define(*cmd);
  cmd->callback([body, &status] { status = body(std::cout, std::cerr); });
}

int run_command(const Command& command, const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App cmd{command.summary, program_name() + " " + command.name};
  const CommandBody body = command.define(cmd);
  refuse_empty_values(cmd);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes the arguments last first
    cmd.parse(reversed);
    return body(out, err);
  } catch (...) {
    return exit_status(&cmd, command.name, args, out, err);
  }
}

int run_variants(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kVariantsCommand, args, out, err);
}
int run_inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kInspectCommand, args, out, err);
}
int run_generate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kGenerateCommand, args, out, err);
}
int run_explain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kExplainCommand, args, out, err);
}
int run_demo(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kDemoCommand, args, out, err);
}
int run_ngram(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return run_command(kNGramCommand, args, out, err);
}

std::string selected_command(const CLI::App& app) {
  const auto selected = app.get_subcommands();
  return selected.empty() ? "" : selected.front()->get_name();
}

int exit_status(const CLI::App* app, const std::string& command, const std::vector<std::string>& args,
                std::ostream& out, std::ostream& err) {
  const std::string& program = program_name();
  const std::string prefix = command.empty() ? program + ": " : program + " " + command + ": ";
  const std::string hint = command.empty() ? program + " --help" : program + " " + command + " --help";
  std::string invocation = command.empty() ? program : program + " " + command;
  for (const auto& a : args) invocation += " " + a;
  try {
    throw;
  } catch (const CLI::CallForHelp&) {
    if (app) out << app->help();  // the selected subcommand's help when there is one
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    if (app) out << app->help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::RequiredError& e) {
    // CLI11 reports a missing required argument before unexpected ones, but an unexpected
    // option is often the required one misspelt: name both.
    std::string extras;
    if (app) {
      const auto selected = app->get_subcommands();
      for (const auto& arg : (selected.empty() ? app : selected.front())->remaining()) extras += " " + arg;
    }
    err << prefix << e.what() << (extras.empty() ? "" : "; not expected:" + extras) << " (try " << hint << ")\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    err << prefix << e.what() << " (try " << hint << ")\n";
    return 2;
  } catch (const UsageError& e) {
    err << prefix << e.what() << " (try " << hint << ")\n";
    return 2;
  } catch (const std::bad_alloc&) {
    err << prefix << "out of memory running `" << invocation
        << "`: the sizes asked for need more memory than is available\n";
    return 1;
  } catch (const std::logic_error& e) {
    // std::stoi and its kin throw invalid_argument / out_of_range with their own name as the
    // message ("stoll"); anything else of the kind is a bug, reported with the command line.
    const std::string what = e.what();
    std::string message = "internal error (" + what + ")";
    if (what.rfind("sto", 0) == 0)
      message = dynamic_cast<const std::out_of_range*>(&e) ? "a number is too large for its type (std::" + what + ")"
                                                           : "a value that should be a number is not one (std::" + what + ")";
    err << prefix << message << " while running `" << invocation << "`\n";
    return 1;
  } catch (const nlohmann::json::exception& e) {
    // The library's text ("[json.exception.type_error.306] ...") is not a message for a user; the
    // readers name the file they parse, and this is the net under them.
    std::string what = e.what();
    if (const size_t close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    err << prefix << "a JSON file or value does not have the expected form (" << what << ") while running `"
        << invocation << "`\n";
    return 1;
  } catch (const std::exception& e) {
    err << prefix << e.what() << "\n";
    return 1;
  } catch (...) {
    err << prefix << "failed with an unknown exception running `" << invocation << "`\n";
    return 1;
  }
}

CLI::Validator int_range(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return fmt::format("must be an integer, got '{}'", text);
        if (v < lo || v > hi) return fmt::format("must be in [{}, {}], got {}", lo, hi, v);
        return "";
      },
      fmt::format("[{}, {}]", lo, hi));
}

void refuse_empty_values(CLI::App& app) {
  static const CLI::Validator non_empty(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "");
  for (CLI::Option* opt : app.get_options())
    if (opt->get_type_size() != 0 && opt->get_name() != "--help" && opt->get_name() != "--prompt") opt->check(non_empty);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

void check_range(const std::string& option, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) fail<UsageError>("{}: must be in [{}, {}], got {}", option, lo, hi, v);
}

}  // namespace attnlab::cli

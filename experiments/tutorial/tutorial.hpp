// Shared by the tutorial programs (experiments/tutorial/NN_*.cpp, docs/tutorial.md): the lesson's
// main (--help, errors), its explanation printed as it runs (say), printing a named tensor with
// its shape, and checking a claim numerically. A failed claim ends the program with exit status
// 1, so CTest (tutorial/NN_*) catches a tutorial that stopped being true.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "attnlab.hpp"
#include "experiments/runner/guard.hpp"

namespace tutorial {

// A paragraph of the lesson, printed as the program runs: the program is the lesson.
inline void say(const std::string& text) { fmt::print("\n{}\n", text); }

// The tutorials' main: prints the title and runs the lesson. `--help` prints the usage (exit 0);
// any other argument is a usage error (exit 2); an exception is a message (exit 1), never an abort.
inline int run(int argc, char** argv, const std::string& title, void (*lesson)()) {
  const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "tutorial";
  return attnlab::runner::guarded(program.c_str(), [&] {
    const std::string arg = argc > 1 ? argv[1] : "";
    if (argc == 2 && (arg == "--help" || arg == "-h")) {
      fmt::print("Usage: {} [--help]\n\n{}\n\n"
                 "Runs the lesson: prints its explanation, the tensors it computes and the\n"
                 "claims it checks; exit status 1 when a claim fails (docs/tutorial.md).\n",
                 program, title);
      return 0;
    }
    if (argc > 1) attnlab::fail<attnlab::runner::UsageError>("unexpected argument '{}': a tutorial takes none", arg);
    fmt::print("{}\n", title);
    lesson();
    return 0;
  });
}

// The main of a lesson that writes files (PNG plots): an optional argument names the directory
// to write them into (created when missing; default the current directory). `--help` prints the
// usage; an argument starting with '-' or a second argument is a usage error (exit 2).
inline int run_in_dir(int argc, char** argv, const std::string& title, void (*lesson)(const std::string& dir)) {
  const std::string program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "tutorial";
  return attnlab::runner::guarded(program.c_str(), [&] {
    const std::string arg = argc > 1 ? argv[1] : "";
    if (argc == 2 && (arg == "--help" || arg == "-h")) {
      fmt::print("Usage: {} [DIR] [--help]\n\n{}\n\n"
                 "Runs the lesson: prints its explanation, the tensors it computes and the\n"
                 "claims it checks, and writes its PNG plots into DIR (default: the current\n"
                 "directory); exit status 1 when a claim fails (docs/tutorial.md).\n",
                 program, title);
      return 0;
    }
    if (argc > 2) attnlab::fail<attnlab::runner::UsageError>("unexpected argument '{}': the lesson takes one directory", argv[2]);
    if (!arg.empty() && arg[0] == '-')
      attnlab::fail<attnlab::runner::UsageError>("unknown option '{}': the lesson takes a directory for its plots", arg);
    const std::string dir = arg.empty() ? "." : arg;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir))
      attnlab::fail<attnlab::FileError>("cannot create the plot directory '{}': {}", dir, ec ? ec.message() : "not a directory");
    fmt::print("{}\n", title);
    lesson(dir);
    return 0;
  });
}

inline void section(const std::string& title) { fmt::print("\n== {} ==\n", title); }

// name, shape, then the values (attnlab tensors format NumPy-like through fmt).
inline void show(const std::string& name, const attnlab::Tensor& t) {
  fmt::print("{} {}:\n{}\n", name, attnlab::to_string(t.shape()), t);
}

inline void check(bool ok, const std::string& claim) {
  fmt::print("{} {}\n", ok ? "[ok]    " : "[FAILED]", claim);
  if (!ok) std::exit(1);
}

// max |a - b| over every element.
inline double max_abs_diff(const attnlab::Tensor& a, const attnlab::Tensor& b) {
  return attnlab::max(attnlab::abs(a - b)).item();
}

// Copies every parameter and buffer `from` and `to` share by name (same shapes), so that two
// variants can be compared with the same weights.
inline void copy_shared(const attnlab::nn::Module& from, attnlab::nn::Module& to) {
  attnlab::NoGradGuard no_grad;
  const attnlab::TensorMap src = from.state_dict();
  for (auto named : {to.named_parameters(), to.named_buffers()})
    for (auto& [name, t] : named) {
      auto it = src.find(name);
      if (it != src.end()) attnlab::copy_(t, it->second);
    }
}

}  // namespace tutorial

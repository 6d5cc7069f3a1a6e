/// @file
/// <attnlab/cli.hpp>: the attnlab command-line tool as a function. A program of one's own whose
/// main is
///
///   int main(int argc, char** argv) { return attnlab::cli::main(argc, argv); }
///
/// has every `attnlab` command (run, list, sweep, report, analyze, viz, variants, ...), with the
/// experiments and attention variants its own code registers beside the built-in ones
/// (docs/experiments.md, "Experiments in one's own repository"). Link attnlab::experiments.
/// @ingroup cli
#pragma once

/// @addtogroup cli
/// @{
namespace attnlab::cli {

/// Parses argv as `attnlab` does and runs the command; returns its exit status (docs/cli.md).
int main(int argc, char** argv);

}  // namespace attnlab::cli
/// @}

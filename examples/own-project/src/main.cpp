// `own`: every attnlab command (run, list, sweep, report, analyze, viz, variants, ...), with this
// project's variant and experiment registered beside the built-in ones.
#include <attnlab/cli.hpp>

int main(int argc, char** argv) { return attnlab::cli::main(argc, argv); }

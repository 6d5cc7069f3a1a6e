// The attnlab executable: every command is in attnlab::cli::main (experiments/cli/cli.cpp).
#include "cli.hpp"

int main(int argc, char** argv) { return attnlab::cli::main(argc, argv); }

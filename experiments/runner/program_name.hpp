/// @file
/// The name the program was started as: the file name of attnlab::cli::main's argv[0], "attnlab"
/// until it is set. Help, usage lines and error messages start with it, so that a project's own
/// program `own` (examples/own-project) says "own run: ..." and "Usage: own check ...".
/// @ingroup runner
#pragma once
#include <string>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

const std::string& program_name();  ///< "attnlab", or the name set_program_name gave
/// Keeps the part of `argv0` after its last '/' ("attnlab" for an empty one).
void set_program_name(const std::string& argv0);

}  // namespace attnlab::runner
/// @}

/// @file
/// Blocks of a Markdown file that a command writes: the lines between a line that is exactly
/// "<!-- NAME:begin -->" and the next line that is exactly "<!-- NAME:end -->". The claims table
/// (claims.hpp, NAME = claims) and the variant tables (`attnlab variants --markdown`, NAME =
/// variants) live in such blocks of README.md and docs/. Markers count only as whole lines, so
/// text beside a marker is never taken for the block, and a file without exactly one ordered pair
/// is an error before anything is written.
/// @ingroup runner
#pragma once
#include <string>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// The text between the markers of `name` in `doc` (each line with its newline). ValueError naming
/// `path` and `what` (e.g. "the claims table") when the marker lines are missing, repeated or out of
/// order.
std::string marked_block(const std::string& doc, const std::string& name, const std::string& path,
                         const std::string& what);

/// `doc` with that text replaced by `block`; the same errors.
std::string replace_marked_block(const std::string& doc, const std::string& name, const std::string& block,
                                 const std::string& path, const std::string& what);

}  // namespace attnlab::runner
/// @}

/// @file
/// The `name(option=value, ...)` grammar shared by attention specs (nn/attention/spec.hpp) and
/// learning-rate schedules (optim/schedule.hpp): a name, optionally followed by parentheses
/// holding comma-separated `option=value` items. Spaces around every part are ignored; values
/// are kept as text for the caller to type-check. Lists inside a value are '+'-joined, so a
/// value never holds ',' or ')'. Also the number syntax both layers read and write: integers
/// in decimal, floating-point values in the shortest form that parses back to the same double.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// A name with options, as written in specs: "local(window=16, heads=4)".
struct OptionString {
  std::string name;  ///< "local"
  std::vector<std::pair<std::string, std::string>> options;  ///< in the order written
};

/// Parses `text`. `what` starts every error message, followed by the text in quotes, e.g.
/// what = "attention spec" gives `attention spec "mha(heads=2": missing ')' at the end; ...`.
/// Errors (ValueError): text after the last ')' or a missing ')', an item that is not
/// option=value, an option name that is not an identifier, an empty value, an option given
/// twice. The name itself is not checked: callers look it up and report unknown names.
OptionString parse_option_string(const std::string& text, const std::string& what);
/// `name` alone without options, else `name(k=v<sep>k=v)`; parse_option_string reads it back.
std::string format_option_string(const OptionString& s, const char* sep = ", ");

/// [A-Za-z_][A-Za-z0-9_]*
bool is_identifier(std::string_view s);
/// The whole of `s` as a decimal integer / a finite or infinite double; nullopt otherwise.
std::optional<int64_t> parse_integer(std::string_view s);
std::optional<double> parse_number(std::string_view s);
/// The shortest text that parse_number reads back as exactly `v`, with no '+' in it (1e21, not
/// 1e+21), so a number can be an item of a '+'-joined list option.
std::string format_number(double v);
/// Whether `s` is well-formed UTF-8 (no overlong form, surrogate or code point above U+10FFFF).
bool is_utf8(std::string_view s);
/// `s` for a message: valid UTF-8 sequences as they are, every other byte as `\xNN`.
std::string printable(std::string_view s);

}  // namespace attnlab
/// @}

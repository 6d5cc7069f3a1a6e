/// @file
/// Reading and writing CSV text (RFC 4180 quoting), for the tables the runner reads back: the claims table
/// (claims.hpp) and the measured tables a report joins to its runs (measured.hpp).
/// @ingroup runner
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// The records of a CSV text: fields split on commas outside double quotes, "" inside quotes for a
/// quote, records ended by a newline outside quotes (LF or CRLF). Each record keeps the line it
/// starts on. ValueError naming `path` and the line when a quoted field is not closed.
std::vector<std::pair<int, std::vector<std::string>>> csv_records(const std::string& text, const std::string& path);

/// A field as written to a CSV file: as it is, or in double quotes (each quote doubled) when it
/// holds a comma, a quote or a line break.
std::string csv_field(const std::string& s);

/// The value of a field that is a whole finite number ("1.5", "-2e3", " 4 ": blanks around it are
/// ignored); nullopt otherwise ("", "nan", "inf", "3x", "1e999", "0x10").
std::optional<double> number_field(const std::string& s);
/// number_field(s) has a value.
bool is_number(const std::string& s);

}  // namespace attnlab::runner
/// @}

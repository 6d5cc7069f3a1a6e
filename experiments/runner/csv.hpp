// Reading CSV text (RFC 4180 quoting), for the tables the runner reads back: the claims table
// (claims.hpp) and the measured tables a report joins to its runs (measured.hpp).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace attnlab::runner {

// The records of a CSV text: fields split on commas outside double quotes, "" inside quotes for a
// quote, records ended by a newline outside quotes (LF or CRLF). Each record keeps the line it
// starts on. ValueError naming `path` and the line when a quoted field is not closed.
std::vector<std::pair<int, std::vector<std::string>>> csv_records(const std::string& text, const std::string& path);

// true when `s` is a whole finite number ("1.5", "-2e3"; not "", "nan", "3x").
bool is_number(const std::string& s);

}  // namespace attnlab::runner

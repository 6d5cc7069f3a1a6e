/// @file
/// A measured table that `attnlab report` joins to a sweep's runs ([report] measured;
/// docs/sweeps.md, "Figures measured outside the sweep"): numbers measured elsewhere, such as each
/// attention variant's time and memory from bench_lra at N = 4096, attached to every run whose
/// configuration names a row, so that the report's table and bubble chart can use them beside the
/// runs' own metrics.
///
/// The file is CSV: a header naming the columns, then one row per configuration value. The first
/// column names the value: a whole value ("mha(heads=4)") or a variant name ("mha"), which matches
/// every spec of that variant. The other columns are numbers (an empty field: not measured).
/// @ingroup runner
#pragma once
#include <string>
#include <utility>
#include <vector>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// A CSV of figures measured outside a sweep: the first field names the row, the rest are numbers.
struct MeasuredTable {
  std::string path;  ///< the CSV file, for messages
  std::vector<std::string> columns;  ///< the number columns, in file order
  std::vector<std::pair<std::string, std::vector<double>>> rows;  ///< first field, numbers (NaN: empty)
};

/// Reads the table; FileError when the file cannot be read, ValueError naming the path, the line
/// and the column for a missing header, a wrong field count, a repeated row or a field that is
/// not a number.
MeasuredTable read_measured_table(const std::string& path);

/// The row for a configuration value: the row whose first field equals `value`, else the one that
/// equals its variant name (the text before "("); nullptr when none does.
const std::vector<double>* measured_row(const MeasuredTable& table, const std::string& value);

}  // namespace attnlab::runner
/// @}

// Measured tables joined to a report's runs (experiments/runner/measured.hpp).
#include "experiments/runner/measured.hpp"

#include <cmath>
#include <limits>

#include "experiments/runner/csv.hpp"
#include "tensor/error.hpp"
#include "tensor/io.hpp"
#include "experiments/runner/file_bounds.hpp"

namespace attnlab::runner {

MeasuredTable read_measured_table(const std::string& path) {
  MeasuredTable t;
  t.path = path;
  const auto records = csv_records(read_text(path, kTableFileBound), path);
  if (records.empty()) fail<ValueError>("{}: empty (expected a header: the key column, then number columns)", path);
  const auto& header = records[0].second;
  if (header.size() < 2)
    fail<ValueError>("{}:{}: the header needs the key column and at least one number column, got {} column(s)", path,
                     records[0].first, header.size());
  t.columns.assign(header.begin() + 1, header.end());
  for (size_t i = 1; i < records.size(); ++i) {
    const auto& [line, fields] = records[i];
    if (fields.size() != header.size())
      fail<ValueError>("{}:{}: {} fields, the header has {}", path, line, fields.size(), header.size());
    for (const auto& [name, numbers] : t.rows)
      if (name == fields[0]) fail<ValueError>("{}:{}: a second row for '{}'", path, line, name);
    std::vector<double> numbers;
    for (size_t c = 1; c < fields.size(); ++c) {
      if (fields[c].empty()) {
        numbers.push_back(std::numeric_limits<double>::quiet_NaN());
      } else if (const std::optional<double> v = number_field(fields[c])) {
        numbers.push_back(*v);
      } else {
        fail<ValueError>("{}:{}: column '{}' must be a number or empty, got '{}'", path, line, header[c], fields[c]);
      }
    }
    t.rows.emplace_back(fields[0], std::move(numbers));
  }
  return t;
}

const std::vector<double>* measured_row(const MeasuredTable& table, const std::string& value) {
  for (const auto& [name, numbers] : table.rows)
    if (name == value) return &numbers;
  const std::string variant = value.substr(0, value.find('('));
  for (const auto& [name, numbers] : table.rows)
    if (name == variant) return &numbers;
  return nullptr;
}

}  // namespace attnlab::runner

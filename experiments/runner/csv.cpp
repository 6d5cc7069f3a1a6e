// CSV text into records (experiments/runner/csv.hpp).
#include "experiments/runner/csv.hpp"

#include <cmath>

#include "tensor/error.hpp"

namespace attnlab::runner {

std::vector<std::pair<int, std::vector<std::string>>> csv_records(const std::string& text, const std::string& path) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, any = false;
  int line = 1, start = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c, line += c == '\n';
      continue;
    }
    if (c == '"') {
      quoted = true, any = true;
    } else if (c == ',') {
      fields.push_back(field), field.clear(), any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) fields.push_back(field), out.emplace_back(start, fields);
      fields.clear(), field.clear(), any = false;
      start = ++line;
    } else {
      field += c, any = true;
    }
  }
  if (quoted) fail<ValueError>("{}:{}: a quoted field is not closed", path, start);
  if (any || !field.empty()) fields.push_back(field), out.emplace_back(start, fields);
  return out;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    const double v = std::stod(s, &used);
    return used == s.size() && std::isfinite(v);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace attnlab::runner

// CSV text into records (experiments/runner/csv.hpp).
#include "experiments/runner/csv.hpp"

#include <cmath>

#include "tensor/error.hpp"
#include "tensor/option_string.hpp"

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

std::optional<double> number_field(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t"), end = s.find_last_not_of(" \t");
  if (begin == std::string::npos) return std::nullopt;
  const std::optional<double> v = parse_number(std::string_view(s).substr(begin, end + 1 - begin));
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

bool is_number(const std::string& s) { return number_field(s).has_value(); }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace attnlab::runner

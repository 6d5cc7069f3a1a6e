// Config resolution (config.hpp): schema defaults overridden by TOML documents and `--set`
// assignments. TOML is parsed by toml++; every leaf is checked against the schema here so that an
// error can name the key, the source and the line.
#include "experiments/runner/config.hpp"
#include "experiments/runner/config_diff.hpp"
#include "experiments/runner/file_bounds.hpp"
#include "tensor/io.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace attnlab::runner {
namespace {

FieldType type_of(const Value& v) {
  switch (v.index()) {
    case 0: return FieldType::Int;
    case 1: return FieldType::Float;
    case 2: return FieldType::Bool;
    default: return FieldType::String;
  }
}

void check_key_syntax(const std::string& key) {
  bool ok = !key.empty() && key.front() != '.' && key.back() != '.' && key.find("..") == std::string::npos;
  for (char c : key) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  if (!ok) fail<ConfigError>("Schema: key '{}' is not a dotted name of letters, digits, '_' and '-'", key);
}

// Edit distance, for "did you mean".
size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" when some schema key is close to `key`, else "".
std::string suggestion(const Schema& schema, const std::string& key) {
  const Field* best = nullptr;
  size_t best_d = 0;
  for (const Field& f : schema.fields()) {
    size_t d = levenshtein(key, f.key);
    if (!best || d < best_d) best = &f, best_d = d;
  }
  // A near miss: a typo or two, or a misplaced table ("steps" for "train.steps").
  if (best && best_d <= std::max<size_t>(2, key.size() / 4)) return fmt::format(" (did you mean '{}'?)", best->key);
  for (const Field& f : schema.fields()) {
    auto dot = f.key.rfind('.');
    if (dot != std::string::npos && f.key.substr(dot + 1) == key) return fmt::format(" (did you mean '{}'?)", f.key);
  }
  return "";
}

// True when `prefix` names a table of the schema ("model" for "model.attention").
bool is_table(const Schema& schema, const std::string& prefix) {
  for (const Field& f : schema.fields())
    if (f.key.size() > prefix.size() && f.key.compare(0, prefix.size(), prefix) == 0 && f.key[prefix.size()] == '.')
      return true;
  return false;
}

std::string describe(const Value& v) { return fmt::format("{} {}", type_name(type_of(v)), to_toml_value(v)); }

std::string node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "int";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "bool";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

// The scalar of a TOML node, or nothing for tables, arrays and dates.
std::optional<Value> scalar(const toml::node& n) {
  if (auto v = n.as_integer()) return Value(int64_t(v->get()));
  if (auto v = n.as_floating_point()) return Value(v->get());
  if (auto v = n.as_boolean()) return Value(v->get());
  if (auto v = n.as_string()) return Value(v->get());
  return std::nullopt;
}

std::string read_file(const std::string& path) {
  // A directory opens as an empty stream on Linux; it would read as an empty config.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    fail<FileError>("config: '{}' is {}, not a regular file", path,
                    std::filesystem::is_directory(path, ec) ? "a directory" : "a special file");
  return read_text(path, kConfigFileBound);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::Int: return "int";
    case FieldType::Float: return "float";
    case FieldType::Bool: return "bool";
    default: return "string";
  }
}

std::string to_toml_value(const Value& v) {
  if (auto p = std::get_if<int64_t>(&v)) return fmt::format("{}", *p);
  if (auto p = std::get_if<bool>(&v)) return *p ? "true" : "false";
  if (auto p = std::get_if<double>(&v)) {
    if (std::isnan(*p)) return "nan";
    if (std::isinf(*p)) return *p > 0 ? "inf" : "-inf";
    std::string s = fmt::format("{}", *p);  // shortest text that reads back to the same double
    if (s.find_first_of(".e") == std::string::npos) s += ".0";  // keep it a TOML float
    return s;
  }
  // A TOML basic string: quotes, backslashes and control characters escaped.
  std::string out = "\"";
  for (unsigned char c : std::get<std::string>(v)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", c);
        else out += char(c);
    }
  }
  return out + "\"";
}

// ---- Schema ----

// The problem with adding `key` to `fields` ("" when none).
static std::string add_error(const std::vector<Field>& fields, const std::string& key) {
  try {
    check_key_syntax(key);
  } catch (const ConfigError& e) {
    return e.what();
  }
  auto nested = [](const std::string& table, const std::string& k) {
    return k.size() > table.size() && k.compare(0, table.size(), table) == 0 && k[table.size()] == '.';
  };
  for (const Field& f : fields) {
    if (f.key == key) return fmt::format("Schema: key '{}' added twice", key);
    if (nested(f.key, key) || nested(key, f.key))
      return fmt::format("Schema: key '{}' and key '{}' cannot both exist (one would be a table of the other)", f.key,
                         key);
  }
  return "";
}

static Schema& add_field(Schema& s, std::vector<Field>& fields, std::string& error, const std::string& key, Value def,
                         const std::string& help) {
  std::string problem = add_error(fields, key);
  if (problem.empty())
    fields.push_back(Field{key, type_of(def), std::move(def), help});
  else if (error.empty())
    error = std::move(problem);
  return s;
}

Schema& Schema::add(const std::string& key, int64_t def, const std::string& help) {
  return add_field(*this, fields_, error_, key, Value(def), help);
}
Schema& Schema::add(const std::string& key, double def, const std::string& help) {
  return add_field(*this, fields_, error_, key, Value(def), help);
}
Schema& Schema::add(const std::string& key, bool def, const std::string& help) {
  return add_field(*this, fields_, error_, key, Value(def), help);
}
Schema& Schema::add(const std::string& key, const std::string& def, const std::string& help) {
  return add_field(*this, fields_, error_, key, Value(def), help);
}

Schema& Schema::bound(const std::string& key, int64_t min, int64_t max) {
  auto it = std::find_if(fields_.begin(), fields_.end(), [&](const Field& f) { return f.key == key; });
  std::string problem;
  if (it == fields_.end())
    problem = fmt::format("Schema: bound of key '{}', which is not in the schema", key);
  else if (it->type != FieldType::Int)
    problem = fmt::format("Schema: bound of key '{}', which is a {}, not an int", key, type_name(it->type));
  else if (min > max || std::get<int64_t>(it->value) < min || std::get<int64_t>(it->value) > max)
    problem = fmt::format("Schema: key '{}': the range [{}, {}] is empty or leaves out the default {}", key, min, max,
                          std::get<int64_t>(it->value));
  if (problem.empty()) {
    it->min = min;
    it->max = max;
  } else if (error_.empty()) {
    error_ = std::move(problem);
  }
  return *this;
}

const Field* Schema::find(const std::string& key) const {
  for (const Field& f : fields_)
    if (f.key == key) return &f;
  return nullptr;
}

// ---- Config ----

Config::Config(Schema schema) : schema_(std::move(schema)) {
  if (!schema_.error().empty()) fail<ConfigError>("{}", schema_.error());
  for (const Field& f : schema_.fields()) {
    values_.push_back(f.value);
    origins_.push_back("default");
  }
}

void Config::set_value(const std::string& key, const Value& value, const std::string& source) {
  const auto& fields = schema_.fields();
  auto it = std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == key; });
  if (it == fields.end()) fail<ConfigError>("{}: unknown key '{}'{}", source, key, suggestion(schema_, key));
  size_t i = size_t(it - fields.begin());
  Value v = value;
  if (it->type == FieldType::Float && type_of(v) == FieldType::Int) v = double(std::get<int64_t>(v));
  if (type_of(v) != it->type)
    fail<ConfigError>("{}: key '{}' expects {}, got {}", source, key, type_name(it->type), describe(v));
  if (it->type == FieldType::Float && std::isnan(std::get<double>(v)))
    fail<ConfigError>("{}: key '{}' expects a number, got nan", source, key);
  if (it->type == FieldType::Int) {
    const int64_t n = std::get<int64_t>(v);
    if (n < it->min || n > it->max)
      fail<ConfigError>("{}: {} = {} is out of its range [{}, {}] (docs/experiments.md, \"Bounded counts\")", source, key,
                        n, it->min, it->max);
  }
  values_[i] = std::move(v);
  origins_[i] = source;
}

void Config::merge_toml(const std::string& text, const std::string& source) {
  toml::table doc;
  try {
    doc = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail<ConfigError>("{}:{}: TOML syntax error: {}", source, e.source().begin.line, e.description());
  }
  // Depth-first over the document; a table is accepted only where the schema has one.
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& t,
                                                                         const std::string& prefix) {
    for (auto&& [k, node] : t) {
      std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      std::string where = fmt::format("{}:{}", source, node.source().begin.line);
      if (auto sub = node.as_table()) {
        if (is_table(schema_, key)) {
          walk(*sub, key);
          continue;
        }
        if (const Field* f = schema_.find(key))
          fail<ConfigError>("{}: key '{}' expects {}, got a table", where, key, type_name(f->type));
        fail<ConfigError>("{}: unknown table '{}'{}", where, key, suggestion(schema_, key));
      }
      const Field* f = schema_.find(key);
      if (!f) {
        if (is_table(schema_, key))
          fail<ConfigError>("{}: '{}' is a table of keys, not a value", where, key);
        fail<ConfigError>("{}: unknown key '{}'{}", where, key, suggestion(schema_, key));
      }
      auto v = scalar(node);
      if (!v) fail<ConfigError>("{}: key '{}' expects {}, got {}", where, key, type_name(f->type), node_type_name(node));
      set_value(key, *v, where);
    }
  };
  walk(doc, "");
}

void Config::merge_file(const std::string& path) { merge_toml(read_file(path), path); }

void Config::set(const std::string& assignment) {
  if (assignment.find_first_of("\n\r") != std::string::npos)
    fail<ConfigError>("--set: '{}' spans several lines; give one key=value per --set", assignment);
  auto eq = assignment.find('=');
  if (eq == std::string::npos)
    fail<ConfigError>("--set: '{}' is not key=value (e.g. --set train.steps=2000)", assignment);
  std::string key = trim(assignment.substr(0, eq));
  std::string text = trim(assignment.substr(eq + 1));
  const Field* f = schema_.find(key);
  if (!f) fail<ConfigError>("--set: unknown key '{}'{}", key, suggestion(schema_, key));
  std::optional<Value> parsed;
  try {
    toml::table t = toml::parse("v = " + text);
    parsed = scalar(*t.get("v"));
  } catch (const toml::parse_error&) {
  }
  // A string key takes any text that is not a TOML string verbatim (mha(heads=4), 123, true),
  // provided it can be written back as one: config.toml must read back on resume.
  if (f->type == FieldType::String && (!parsed || type_of(*parsed) != FieldType::String)) {
    try {
      toml::parse("v = " + to_toml_value(Value(text)));
    } catch (const toml::parse_error& e) {
      fail<ConfigError>("--set: key '{}': the value is not UTF-8 text ({})", key, e.description());
    }
    parsed = Value(text);
  }
  if (!parsed)
    fail<ConfigError>("--set: key '{}' expects {}, got '{}' (not a TOML value)", key, type_name(f->type), text);
  set_value(key, *parsed, "--set");
}

static size_t index_of(const Schema& schema, const std::string& key, const char* want) {
  const auto& fields = schema.fields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].key == key) return i;
  fail<ConfigError>("config: no key '{}' in the schema (reading {}){}", key, want, suggestion(schema, key));
}

const Value& Config::get(const std::string& key) const { return values_[index_of(schema_, key, "a value")]; }

template <class T>
static const T& typed(const Config& c, const std::string& key, FieldType t) {
  const Value& v = c.get(key);
  if (auto p = std::get_if<T>(&v)) return *p;
  fail<ConfigError>("config: key '{}' is {}, read as {}", key, type_name(type_of(v)), type_name(t));
}

int64_t Config::get_int(const std::string& key) const { return typed<int64_t>(*this, key, FieldType::Int); }
double Config::get_float(const std::string& key) const { return typed<double>(*this, key, FieldType::Float); }
bool Config::get_bool(const std::string& key) const { return typed<bool>(*this, key, FieldType::Bool); }
const std::string& Config::get_string(const std::string& key) const {
  return typed<std::string>(*this, key, FieldType::String);
}

const std::string& Config::origin(const std::string& key) const {
  return origins_[index_of(schema_, key, "its origin")];
}

std::string Config::to_toml() const {
  // Keys without a table come first (TOML puts them before any [table]); then one [table] per
  // distinct table, in order of first appearance.
  const auto& fields = schema_.fields();
  std::vector<std::string> tables;
  for (const Field& f : fields) {
    auto dot = f.key.rfind('.');
    std::string table = dot == std::string::npos ? "" : f.key.substr(0, dot);
    if (std::find(tables.begin(), tables.end(), table) == tables.end()) tables.push_back(table);
  }
  std::stable_partition(tables.begin(), tables.end(), [](const std::string& t) { return t.empty(); });
  std::string out;
  for (const std::string& table : tables) {
    if (!table.empty()) out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", table);
    for (size_t i = 0; i < fields.size(); ++i) {
      auto dot = fields[i].key.rfind('.');
      std::string t = dot == std::string::npos ? "" : fields[i].key.substr(0, dot);
      if (t != table) continue;
      if (!fields[i].help.empty()) out += "# " + fields[i].help + "\n";
      out += fmt::format("{} = {}\n", fields[i].key.substr(dot == std::string::npos ? 0 : dot + 1),
                         to_toml_value(values_[i]));
    }
  }
  return out;
}

std::string Config::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  const auto& fields = schema_.fields();
  for (size_t i = 0; i < fields.size(); ++i)
    std::visit([&](const auto& v) { j[fields[i].key] = v; }, values_[i]);
  return j.dump();
}

bool Config::operator==(const Config& other) const {
  const auto& a = schema_.fields();
  const auto& b = other.schema_.fields();
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].key != b[i].key || values_[i] != other.values_[i]) return false;
  return true;
}

namespace {

// `text` with what the help says it means, when the help writes "TEXT = meaning" (up to the
// next ',', ';' or '('): "0" with "sequence length, 0 = the task's default (...)" gives
// "0 = the task's default".
std::string with_meaning(const std::string& text, const std::string& help) {
  const std::string marker = text + " = ";
  for (size_t at = help.find(marker); at != std::string::npos; at = help.find(marker, at + 1)) {
    if (at > 0 && std::string_view(" ,;(").find(help[at - 1]) == std::string_view::npos) continue;
    const size_t start = at + marker.size(), end = help.find_first_of(",;(", start);
    std::string meaning = help.substr(start, end == std::string::npos ? std::string::npos : end - start);
    while (!meaning.empty() && meaning.back() == ' ') meaning.pop_back();
    if (!meaning.empty()) return text + " = " + meaning;
  }
  return text;
}

}  // namespace

std::string config_differences(const Config& old, const Config& now, const std::string& old_name,
                               const std::string& now_name) {
  std::string out;
  for (const Field& f : now.schema().fields())
    if (old.get(f.key) != now.get(f.key))
      out += fmt::format("{}'{}' ({}: {}, {}: {})", out.empty() ? "" : ", ", f.key, old_name,
                         with_meaning(to_toml_value(old.get(f.key)), f.help), now_name,
                         with_meaning(to_toml_value(now.get(f.key)), f.help));
  return out;
}

}  // namespace attnlab::runner

#include "nn/attention/spec.hpp"

#include <cmath>

#include "tensor/error.hpp"

namespace attnlab::nn {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split_plus(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find('+', start);
    out.push_back(trim(s.substr(start, p - start)));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::string type_name(OptionType t) {
  switch (t) {
    case OptionType::Int: return "an integer";
    case OptionType::Double: return "a number";
    case OptionType::Bool: return "true or false";
    case OptionType::Choice: return "one of";
    case OptionType::List: return "a +-joined list of";
    case OptionType::IntList: return "a +-joined list of integers";
  }
  return "?";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

bool parse_int(const std::string& s, int64_t* out) {
  auto v = parse_integer(s);
  if (v) *out = *v;
  return v.has_value();
}

bool parse_double(const std::string& s, double* out) {
  auto v = parse_number(s);
  if (v) *out = *v;
  return v.has_value();
}

}  // namespace

Spec parse_spec(const std::string& text) {
  Spec spec = parse_option_string(text, "attention spec");
  if (!is_identifier(spec.name))
    fail<ValueError>("attention spec \"{}\": expected a variant name like mha or talking_heads(heads=8)", text);
  return spec;
}

std::string to_string(const Spec& spec) { return format_option_string(spec); }

const char* to_string(Support s) {
  switch (s) {
    case Support::yes: return "yes";
    case Support::no: return "no";
    case Support::probe: return "probe";
  }
  return "?";
}

namespace {
Capabilities every(Support s) {
  Capabilities c;
  c.cross = c.causal = c.key_mask = c.query_mask = c.pruning = c.decoding = c.segments = s;
  return c;
}
}  // namespace

Capabilities Capabilities::all() { return every(Support::yes); }
Capabilities Capabilities::none() { return every(Support::no); }

Capabilities Capabilities::key_summary() {
  Capabilities c = all();
  c.causal = c.decoding = c.segments = c.query_mask = Support::no;
  return c;
}

std::vector<std::pair<std::string, Support>> Capabilities::features() const {
  return {{"cross", cross},     {"causal", causal},     {"key_mask", key_mask}, {"query_mask", query_mask},
          {"pruning", pruning}, {"decoding", decoding}, {"segments", segments}};
}

Options::Options(const VariantSchema& schema, const Spec& spec) : variant_(schema.name), schema_(&schema) {
  for (auto& [name, value] : spec.options) {
    bool known = false;
    for (const OptionSchema& o : schema.options) known |= o.name == name;
    if (!known) {
      std::vector<std::string> names;
      for (const OptionSchema& o : schema.options) names.push_back(o.name);
      fail<ValueError>("{}: unknown option {} (allowed: {})", variant_, name, join(names, ", "));
    }
    values_[name] = value;
  }
  // Validate every given value now, so errors surface at construction, not at first use.
  for (auto& [name, value] : values_) {
    const OptionSchema& o = schema_of(name);
    switch (o.type) {
      case OptionType::Int: get_int(name); break;
      case OptionType::Double: get_double(name); break;
      case OptionType::Bool: get_bool(name); break;
      case OptionType::Choice: get_choice(name); break;
      case OptionType::List: get_list(name); break;
      case OptionType::IntList: get_int_list(name); break;
    }
  }
}

const OptionSchema& Options::schema_of(const std::string& name) const {
  for (const OptionSchema& o : schema_->options)
    if (o.name == name) return o;
  fail<ValueError>("{}: internal: option {} is not in the schema", variant_, name);
}

bool Options::given(const std::string& name) const { return values_.count(name) > 0; }

bool Options::accepts(const std::string& name) const {
  for (const OptionSchema& o : schema_->options)
    if (o.name == name) return true;
  return false;
}

std::string Options::raw(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  return schema_of(name).default_value;
}

void Options::reject(const std::string& name, const std::string& why) const {
  fail<ValueError>("{}: option {}={}: {}", variant_, name, raw(name), why);
}

// Int options size tensors; the bound keeps a product of a few of them inside int64, so an
// absurd value is an error naming the option rather than an overflow (docs/attention.md,
// "Spec strings").
constexpr int64_t kMaxOptionInt = 2147483647;

int64_t Options::get_int(const std::string& name) const {
  int64_t v;
  if (!parse_int(raw(name), &v)) reject(name, "expected " + type_name(OptionType::Int));
  if (v > kMaxOptionInt || v < -kMaxOptionInt)
    reject(name, fmt::format("expected an integer of magnitude at most 2^31-1 = {}", kMaxOptionInt));
  return v;
}

std::optional<int64_t> Options::get_optional_int(const std::string& name) const {
  if (!given(name) && schema_of(name).default_value.empty()) return std::nullopt;
  return get_int(name);
}

double Options::get_double(const std::string& name) const {
  double v;
  if (!parse_double(raw(name), &v)) reject(name, "expected " + type_name(OptionType::Double));
  if (!std::isfinite(v)) reject(name, "expected a finite number, not nan or inf");
  return v;
}

bool Options::get_bool(const std::string& name) const {
  const std::string v = raw(name);
  if (v == "true") return true;
  if (v == "false") return false;
  reject(name, "expected true or false");
}

std::string Options::get_choice(const std::string& name) const {
  const OptionSchema& o = schema_of(name);
  const std::string v = raw(name);
  for (const std::string& c : o.choices)
    if (c == v) return v;
  reject(name, "expected one of " + join(o.choices, ", "));
}

std::vector<std::string> Options::get_list(const std::string& name) const {
  const OptionSchema& o = schema_of(name);
  std::vector<std::string> items = split_plus(raw(name));
  for (size_t i = 0; i < items.size(); ++i) {
    bool ok = o.choices.empty();
    for (const std::string& c : o.choices) ok |= c == items[i];
    if (!ok) reject(name, "\"" + items[i] + "\" is not one of " + join(o.choices, ", "));
    for (size_t j = 0; j < i; ++j)
      if (items[j] == items[i]) reject(name, "\"" + items[i] + "\" is named twice");
  }
  return items;
}

std::vector<int64_t> Options::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  for (const std::string& item : split_plus(raw(name))) {
    int64_t v;
    if (!parse_int(item, &v)) reject(name, "expected " + type_name(OptionType::IntList));
    if (v > kMaxOptionInt || v < -kMaxOptionInt)
      reject(name, fmt::format("expected integers of magnitude at most 2^31-1 = {}", kMaxOptionInt));
    out.push_back(v);
  }
  return out;
}

std::string format_spec(const VariantSchema& schema, const OptionValues& values) {
  for (const auto& [name, value] : values.values()) {
    bool known = false;
    for (const OptionSchema& o : schema.options) known |= o.name == name;
    if (!known) fail<ValueError>("{}: internal: spec() sets option {}={}, which the schema lacks", schema.name, name, value);
  }
  Spec spec{schema.name, {}};
  for (const OptionSchema& o : schema.options) {
    auto it = values.values().find(o.name);
    if (it != values.values().end() && !it->second.empty()) spec.options.emplace_back(o.name, it->second);
  }
  return to_string(spec);
}

}  // namespace attnlab::nn

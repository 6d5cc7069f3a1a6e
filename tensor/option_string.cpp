// The `name(option=value, ...)` grammar (option_string.hpp).
#include "tensor/option_string.hpp"

#include <cctype>
#include <charconv>

#include "tensor/error.hpp"

namespace attnlab {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

OptionString parse_option_string(const std::string& text, const std::string& what) {
  const std::string s = trim(text);
  OptionString out;
  const size_t open = s.find('(');
  out.name = trim(std::string_view(s).substr(0, open));
  if (open == std::string::npos) return out;
  if (s.back() != ')')
    fail<ValueError>("{} \"{}\": missing ')' at the end; expected name(option=value, ...)", what, text);
  const std::string body = trim(std::string_view(s).substr(open + 1, s.size() - open - 2));
  if (body.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = body.find(',', start);
    const std::string item = trim(std::string_view(body).substr(start, comma == std::string::npos ? comma : comma - start));
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail<ValueError>("{} \"{}\": '{}' is not of the form option=value", what, text, item);
    std::string name = trim(std::string_view(item).substr(0, eq)), value = trim(std::string_view(item).substr(eq + 1));
    if (!is_identifier(name)) fail<ValueError>("{} \"{}\": '{}' is not an option name", what, text, name);
    if (value.empty()) fail<ValueError>("{} \"{}\": option '{}' has an empty value", what, text, name);
    for (const auto& [n, v] : out.options)
      if (n == name) fail<ValueError>("{} \"{}\": option '{}' given twice", what, text, name);
    out.options.emplace_back(std::move(name), std::move(value));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string format_option_string(const OptionString& s, const char* sep) {
  if (s.options.empty()) return s.name;
  std::string out = s.name + "(";
  for (size_t i = 0; i < s.options.size(); ++i) out += (i ? sep : "") + s.options[i].first + "=" + s.options[i].second;
  return out + ")";
}

std::optional<int64_t> parse_integer(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

// The length of the well-formed UTF-8 sequence starting at s[i], 0 if there is none.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;  // <= U+10FFFF
  else return 0;
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string format_number(double v) {
  // fmt writes a positive exponent as "e+21"; the '+' would split the number inside a '+'-joined
  // list option (alibi_slopes=1e21+0.5), so it is dropped: "1e21" reads back the same.
  std::string s = fmt::format("{}", v);
  if (const size_t e = s.find("e+"); e != std::string::npos) s.erase(e + 1, 1);
  return s;
}

}  // namespace attnlab

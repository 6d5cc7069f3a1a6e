// The strict JSON parser of json_lite.hpp: a recursive-descent reader over a string_view with
// a depth cap. Grammar and escapes follow RFC 8259.
#include "tensor/json_lite.hpp"

#include <charconv>
#include <cstdlib>
#include <unordered_set>

namespace attnlab::json_lite {

Value::Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
Value::~Value() = default;

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "a boolean";
    case Value::Kind::Number: return "a number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "?";
}

namespace {

std::string describe_byte(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

// The length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 if it is
// not one: RFC 3629, so no overlong forms, no surrogates, nothing above U+10FFFF.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) { return b(k) >= lo && b(k) <= hi; };
  const unsigned c = b(0);
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (c == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Value document() {
    Value v = value(0);
    skip_ws();
    if (i_ != s_.size()) error(i_, "unexpected {} after the JSON value", describe_byte(s_[i_]));
    return v;
  }

 private:
  template <class... Args>
  [[noreturn]] void error(size_t at, fmt::format_string<Args...> f, Args&&... args) {
    throw ParseError(at, fmt::format(f, std::forward<Args>(args)...));
  }

  bool at_end() const { return i_ >= s_.size(); }

  void skip_ws() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  void expect(char c, const char* where) {
    skip_ws();
    if (at_end()) error(i_, "unexpected end of text, expected '{}' {}", c, where);
    if (s_[i_] != c) error(i_, "expected '{}' {}, found {}", c, where, describe_byte(s_[i_]));
    ++i_;
  }

  Value value(int depth) {
    skip_ws();
    if (at_end()) error(i_, "unexpected end of text, expected a value");
    Value v;
    v.offset = i_;
    char c = s_[i_];
    if (c == '{' || c == '[') {
      if (depth >= max_depth_) error(i_, "nesting deeper than {} levels", max_depth_);
      if (c == '{') object(v, depth + 1);
      else array(v, depth + 1);
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.string = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      number(v);
    } else if (literal("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::Bool;
    } else if (literal("null")) {
      v.kind = Value::Kind::Null;
    } else {
      error(i_, "unexpected {}, expected a value", describe_byte(c));
    }
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  void object(Value& v, int depth) {
    v.kind = Value::Kind::Object;
    ++i_;  // '{'
    skip_ws();
    if (!at_end() && s_[i_] == '}') {
      ++i_;
      return;
    }
    std::unordered_set<std::string> seen;
    while (true) {
      skip_ws();
      if (at_end()) error(i_, "unexpected end of text, expected an object key");
      if (s_[i_] != '"') error(i_, "expected a string key, found {}", describe_byte(s_[i_]));
      size_t key_at = i_;
      std::string key = string();
      if (!seen.insert(key).second) error(key_at, "duplicate key {}", quote(key));
      expect(':', "after an object key");
      Value item = value(depth);
      v.object.emplace_back(std::move(key), std::move(item));
      skip_ws();
      if (at_end()) error(i_, "unexpected end of text, expected ',' or '}}' in an object");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == '}') {
        ++i_;
        return;
      }
      error(i_, "expected ',' or '}}' in an object, found {}", describe_byte(s_[i_]));
    }
  }

  void array(Value& v, int depth) {
    v.kind = Value::Kind::Array;
    ++i_;  // '['
    skip_ws();
    if (!at_end() && s_[i_] == ']') {
      ++i_;
      return;
    }
    while (true) {
      v.array.push_back(value(depth));
      skip_ws();
      if (at_end()) error(i_, "unexpected end of text, expected ',' or ']' in an array");
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (s_[i_] == ']') {
        ++i_;
        return;
      }
      error(i_, "expected ',' or ']' in an array, found {}", describe_byte(s_[i_]));
    }
  }

  uint32_t hex4() {
    if (s_.size() - i_ < 4) error(i_, "truncated \\u escape");
    uint32_t cp = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_ + k];
      uint32_t d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else error(i_ + k, "bad hex digit {} in a \\u escape", describe_byte(c));
      cp = cp * 16 + d;
    }
    i_ += 4;
    return cp;
  }

  std::string string() {
    size_t start = i_;
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) error(start, "unterminated string");
      char c = s_[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error(i_, "unescaped control {} in a string", describe_byte(c));
      if (static_cast<unsigned char>(c) >= 0x80) {
        const size_t n = utf8_length(s_, i_);
        if (n == 0) error(i_, "invalid UTF-8 byte {} in a string", describe_byte(c));
        out.append(s_.substr(i_, n));
        i_ += n;
        continue;
      }
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      size_t esc_at = i_;
      ++i_;
      if (at_end()) error(start, "unterminated string");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) error(esc_at, "lone low surrogate \\u{:04x}", cp);
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (s_.substr(i_, 2) != "\\u") error(esc_at, "high surrogate \\u{:04x} without a low surrogate", cp);
            i_ += 2;
            uint32_t lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff)
              error(esc_at, "high surrogate \\u{:04x} followed by \\u{:04x}, not a low surrogate", cp, lo);
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: error(esc_at, "invalid escape: backslash followed by {}", describe_byte(e));
      }
    }
  }

  void number(Value& v) {
    size_t start = i_;
    auto digits = [&] {
      size_t from = i_;
      while (!at_end() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - from;
    };
    if (s_[i_] == '-') ++i_;
    if (at_end() || s_[i_] < '0' || s_[i_] > '9') error(start, "a number needs digits after '-'");
    if (s_[i_] == '0') {
      ++i_;
      if (!at_end() && s_[i_] >= '0' && s_[i_] <= '9') error(start, "a number may not have leading zeros");
    } else {
      digits();
    }
    bool integral = true;
    if (!at_end() && s_[i_] == '.') {
      ++i_;
      integral = false;
      if (digits() == 0) error(i_, "a number needs digits after '.'");
    }
    if (!at_end() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integral = false;
      if (!at_end() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) error(i_, "a number needs digits in its exponent");
    }
    v.kind = Value::Kind::Number;
    std::string_view text = s_.substr(start, i_ - start);
    if (integral) {
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v.integer);
      v.is_integer = ec == std::errc() && end == text.data() + text.size();
    }
    // strtod needs a terminated string; numbers are short, so a copy is cheap.
    v.number = v.is_integer ? static_cast<double>(v.integer) : std::strtod(std::string(text).c_str(), nullptr);
  }

  std::string_view s_;
  size_t i_ = 0;
  int max_depth_;
};

}  // namespace

Value parse(std::string_view text, int max_depth) { return Parser(text, max_depth).document(); }

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;  // \b and \f as Python's json.dumps writes them
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  return out + "\"";
}

}  // namespace attnlab::json_lite

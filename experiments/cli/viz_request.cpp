// Parsing /api/attend queries and encoding the student's input (viz_request.hpp).
#include "experiments/cli/viz_request.hpp"

#include <array>
#include <charconv>

#include <fmt/format.h>

namespace attnlab::cli {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte as the messages show it: the character when printable ASCII, else 0xNN.
std::string shown(unsigned char b) {
  return b > 32 && b < 127 ? fmt::format("'{}'", char(b)) : fmt::format("0x{:02x}", b);
}

// application/x-www-form-urlencoded: %XX is a byte, '+' a space. `name` is the parameter, for
// messages; `limit` bounds the decoded size (413 beyond it).
std::string percent_decode(std::string_view s, const std::string& name, size_t limit) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= limit)
      throw RequestError(413, fmt::format("{} is longer than the limit of {} bytes", name, limit));
    const char c = s[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%') {
      const int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        throw RequestError(400, fmt::format("{}: bad percent escape '{}' at byte {} (expected %XX, X a hex digit)", name,
                                            s.substr(i, 3), i));
      out += char(hi * 16 + lo);
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// RequestError unless `s` is UTF-8 without control bytes other than tab and newline.
void check_text(const std::string& s, const std::string& name) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if ((b < 32 && b != '\t' && b != '\n') || b == 0x7f)
        throw RequestError(400, fmt::format("{} has the control byte {} at offset {}; only text, tabs and newlines are "
                                            "accepted", name, shown(b), i));
      ++i;
      continue;
    }
    // Lead byte: 110xxxxx (2), 1110xxxx (3), 11110xxx (4, up to U+10FFFF); no overlong forms.
    const size_t n = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && n == 3) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(b == 0xe0 && b1 < 0xa0) && !(b == 0xed && b1 >= 0xa0);  // overlong; UTF-16 surrogates
    }
    if (ok && n == 4) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(b == 0xf0 && b1 < 0x90) && !(b == 0xf4 && b1 >= 0x90);  // overlong; beyond U+10FFFF
    }
    if (!ok) throw RequestError(400, fmt::format("{} is not valid UTF-8: byte {} at offset {}", name, shown(b), i));
    i += n;
  }
}

}  // namespace

AttendQuery parse_attend_query(std::string_view query, size_t max_input_bytes) {
  AttendQuery q;
  bool seen_input = false, seen_example = false;
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view pair = query.substr(start, end - start);
    start = end + 1;
    if (pair.empty()) continue;  // "a=1&&b=2", a trailing '&'
    const size_t eq = pair.find('=');
    const std::string key = percent_decode(pair.substr(0, eq), "a parameter name", 64);
    const std::string_view raw = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (key == "input") {
      if (seen_input) throw RequestError(400, "input is given twice; give it once");
      seen_input = true;
      std::string text = percent_decode(raw, "input", max_input_bytes);
      check_text(text, "input");
      q.input = std::move(text);
    } else if (key == "example") {
      if (seen_example) throw RequestError(400, "example is given twice; give it once");
      seen_example = true;
      const std::string text = percent_decode(raw, "example", 32);
      int64_t value = -1;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0)
        throw RequestError(400, fmt::format("example must be a non-negative integer (a validation example's index), got "
                                            "'{}'", text.substr(0, 32)));
      q.example = value;
    } else {
      std::string name = key;
      check_text(name, "a parameter name");
      throw RequestError(400, fmt::format("unknown parameter '{}'; /api/attend takes input=TEXT or example=INDEX", name));
    }
  }
  if (seen_input == seen_example)
    throw RequestError(400, seen_input ? "give input or example, not both"
                                       : "no input: /api/attend takes input=TEXT or example=INDEX");
  if (q.input && q.input->empty()) throw RequestError(400, "input is empty: type some text");
  return q;
}

std::vector<int64_t> encode_input(const runner::TaskData& task, const std::string& text, int64_t max_tokens) {
  std::vector<int64_t> ids;
  auto push = [&](int64_t id) {
    if (int64_t(ids.size()) >= max_tokens)
      throw RequestError(413, fmt::format("the input has more than {} tokens, the limit of this page (the model's "
                                          "context and --max-tokens)", max_tokens));
    ids.push_back(id);
  };
  if (task.language_model && !task.token_bytes.empty()) {
    std::array<int64_t, 256> id_of;
    id_of.fill(-1);
    for (size_t i = task.token_unk ? 1 : 0; i < task.token_bytes.size(); ++i) id_of[task.token_bytes[i]] = int64_t(i);
    for (size_t i = 0; i < text.size(); ++i) {
      const auto b = static_cast<unsigned char>(text[i]);
      if (id_of[b] < 0 && !task.token_unk)
        throw RequestError(400, fmt::format("the input has the byte {} at offset {}, which is not in the model's "
                                            "vocabulary of {} bytes", shown(b), i, task.token_bytes.size()));
      push(id_of[b] < 0 ? 0 : id_of[b]);
    }
    return ids;
  }
  if (task.vocab_size == 0 || task.tokens.empty())
    throw RequestError(400, fmt::format("the inputs of task '{}' are feature vectors, not tokens: pick a validation "
                                        "example instead of typing", task.name));
  size_t p = 0;
  while (p < text.size()) {
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\n')) ++p;
    if (p == text.size()) break;
    size_t e = p;
    while (e < text.size() && text[e] != ' ' && text[e] != '\t' && text[e] != '\n') ++e;
    const std::string word = text.substr(p, e - p);
    int64_t id = -1;
    for (size_t i = 0; i < task.tokens.size() && id < 0; ++i)
      if (task.tokens[i] == word) id = int64_t(i);
    if (id < 0 || id >= task.vocab_size) {
      std::string known;
      for (size_t i = 0; i < task.tokens.size() && i < 24; ++i)
        if (int64_t(i) != task.pad_id) {
          if (!known.empty()) known += ' ';
          known += task.tokens[i];
        }
      throw RequestError(400, fmt::format("'{}' at offset {} is not a token of task '{}' (tokens: {}{})", word.substr(0, 40),
                                          p, task.name, known, task.tokens.size() > 24 ? " ..." : ""));
    }
    if (id == task.pad_id)
      throw RequestError(400, fmt::format("'{}' at offset {} is the padding token; leave it out", word, p));
    push(id);
    p = e;
  }
  if (ids.empty()) throw RequestError(400, "the input has no tokens: type some");
  return ids;
}

std::string input_text(const runner::TaskData& task, const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) {
    if (id == task.pad_id && task.pad_id >= 0) continue;
    if (task.language_model && !task.token_bytes.empty()) {
      const bool unk = (task.token_unk && id == 0) || id < 0 || id >= int64_t(task.token_bytes.size());
      out += unk ? '?' : char(task.token_bytes[size_t(id)]);
    } else {
      if (!out.empty()) out += ' ';
      out += task.token(id);
    }
  }
  return out;
}

}  // namespace attnlab::cli

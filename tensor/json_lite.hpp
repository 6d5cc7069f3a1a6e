/// @file
/// A small strict JSON parser for the headers of files attnlab reads (safetensors). It accepts
/// exactly RFC 8259 JSON: objects, arrays, strings (every escape, \uXXXX with surrogate pairs
/// decoded to UTF-8), numbers, true/false/null. Integers that fit int64 are kept exactly; every
/// other number is kept as a double. Errors carry the byte offset of the defect so that callers
/// can report "bad JSON at byte K". Nesting is capped so that a corrupted header of many '['
/// cannot overflow the stack. Private to tensor/: not part of the public API.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/error.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab::json_lite {

struct ParseError : ValueError {
  ParseError(size_t at, const std::string& what) : ValueError(what), offset(at) {}
  size_t offset;  ///< byte offset of the defect in the parsed text
};

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  size_t offset = 0;      ///< where the value starts in the text, for the caller's own errors
  bool boolean = false;
  bool is_integer = false;  ///< a number written without fraction/exponent that fits int64
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  ///< in file order; keys are unique

  const Value* find(std::string_view key) const;

  /// Defined out of line, where Value is complete: `object` holds pairs containing Value, and
  /// clang 14 with libstdc++ 12 rejects the implicit inline ones.
  Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();
};

const char* kind_name(Value::Kind k);

/// Parses one JSON value; only whitespace may follow it. Duplicate object keys are an error.
Value parse(std::string_view text, int max_depth = 64);

/// `s` as a JSON string literal, quotes included. Non-ASCII UTF-8 bytes pass through unchanged.
std::string quote(std::string_view s);

}  // namespace attnlab::json_lite
/// @}

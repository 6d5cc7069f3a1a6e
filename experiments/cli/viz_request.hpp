/// @file
/// The requests of `attnlab viz --serve` (viz_serve.cpp) as plain functions, apart from the HTTP
/// server so that tests and fuzz/fuzz_viz_request.cpp call them on any bytes:
///
///   GET /api/attend?input=TEXT     the maps of the student's input
///   GET /api/attend?example=I      the maps of validation example I (classifiers)
///
/// TEXT is percent-encoded UTF-8 ('+' is a space, as an HTML form sends it). A language model's
/// TEXT is the text itself, one token per byte; a token task's TEXT is its tokens' display texts
/// separated by white space ("[MAX 2 [MIN 4 7 ] 0 ]"). Every malformed request is a RequestError
/// carrying the HTTP status to answer with (400 malformed, 413 too long) and a message that names
/// the parameter, the byte or token, and what was expected.
/// @ingroup cli
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/runner/task.hpp"
#include "tensor/error.hpp"

/// @addtogroup cli
/// @{
namespace attnlab::cli {

struct RequestError : ValueError {
  int status;  ///< 400 malformed, 413 too long, 404 no such example
  RequestError(int status_, const std::string& message) : ValueError(message), status(status_) {}
};

/// Exactly one of the two is set.
struct AttendQuery {
  std::optional<std::string> input;  ///< decoded UTF-8, 1..max_input_bytes bytes
  std::optional<int64_t> example;    ///< >= 0
};

/// `query` is the raw text after '?' of the request target ("input=ab%20c"). RequestError for a
/// bad percent escape, invalid UTF-8, a control byte other than tab and newline, an unknown or
/// repeated parameter, neither or both of input and example, an empty input, an input longer than
/// max_input_bytes (413), or an example that is not a non-negative integer.
AttendQuery parse_attend_query(std::string_view query, size_t max_input_bytes);

/// The token ids of `text` for `task`: one per byte through task.token_bytes (a language model;
/// a byte outside the vocabulary maps to `<unk>` when the vocabulary has one), else one per
/// white-space separated display text of task.tokens. RequestError (400) naming the byte or token
/// that is not in the vocabulary, for padding typed as a token, and for a task whose inputs are
/// features; (413) for more than max_tokens tokens.
std::vector<int64_t> encode_input(const runner::TaskData& task, const std::string& text, int64_t max_tokens);

/// The text encode_input reads back to `ids` (padding dropped): the bytes of a language model's
/// ids, else the display texts joined by spaces. For showing a validation example as editable
/// text.
std::string input_text(const runner::TaskData& task, const std::vector<int64_t>& ids);

}  // namespace attnlab::cli
/// @}

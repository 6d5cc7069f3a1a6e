/// @file
/// attnlab error types. Every user-facing failure is one of these, with a message that names the
/// op or option, the shapes/dtypes/values seen, and what was expected (docs/conventions.md,
/// "Errors").
/// @ingroup tensor
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

/// @addtogroup tensor
/// @{
namespace attnlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Shapes that do not fit together (broadcast, matmul inner sizes, reshape numel, ...).
struct ShapeError : Error { using Error::Error; };
/// Wrong dtype for an op, or two dtypes that must match and do not.
struct DTypeError : Error { using Error::Error; };
/// A dimension or index out of range.
struct IndexError : Error { using Error::Error; };
/// An option or argument value outside its allowed set.
struct ValueError : Error { using Error::Error; };
/// Misuse of the autograd engine (backward twice, non-scalar root without gradient, ...).
struct AutogradError : Error { using Error::Error; };
/// A tensor larger than the machine can hold; the message names the shape, dtype and bytes.
struct MemoryError : Error { using Error::Error; };
/// A file that cannot be read, written or parsed; the message names the path and the defect.
struct FileError : Error { using Error::Error; };

/// Throws E with the fmt-formatted message: fail<ShapeError>("matmul: {} and {}", a, b).
template <class E = Error, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace attnlab
/// @}

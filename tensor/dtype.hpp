/// @file
/// Element types. float32 is the default; float64 exists for gradient checks; int64 holds
/// indices; bool (one byte) holds masks and comparison results; bfloat16 (tensor/bfloat16.hpp) is
/// a storage type for mixed precision: tensors convert to and from it, and bf16 matrix products
/// return float32 (autograd/autocast.hpp). Ops that compute (is_floating) take float32 or float64.
/// @ingroup tensor
#pragma once
#include <cstdint>
#include <string_view>

#include "tensor/bfloat16.hpp"
#include "tensor/error.hpp"

/// @addtogroup tensor
/// @{
namespace attnlab {

/// The element types of a tensor.
enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

inline constexpr DType kFloat32 = DType::Float32;  ///< 32-bit float (the default)
inline constexpr DType kFloat64 = DType::Float64;  ///< 64-bit float (gradient checks)
inline constexpr DType kInt64 = DType::Int64;  ///< 64-bit signed integer (token ids, indices)
inline constexpr DType kBool = DType::Bool;  ///< bool (masks)
inline constexpr DType kBFloat16 = DType::BFloat16;  ///< bfloat16 (storage and matrix products under autocast)

/// Bytes per element.
constexpr int64_t itemsize(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
    case DType::BFloat16: return 2;
  }
  return 0;
}

/// "float32", "float64", "int64", "bool" or "bfloat16".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

/// The floating dtypes ops compute in. bfloat16 holds floating values too, but only for storage
/// and matrix products (is_floating_storage).
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
constexpr bool is_floating_storage(DType t) { return is_floating(t) || t == DType::BFloat16; }  ///< a floating dtype or bfloat16

/// The DType of the C++ type T: dtype_of<float>::value is kFloat32.
template <class T> struct dtype_of;
/// float: kFloat32.
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; /**< kFloat32 */ };
/// double: kFloat64.
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; /**< kFloat64 */ };
/// int64_t: kInt64.
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; /**< kInt64 */ };
/// bool: kBool.
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; /**< kBool */ };
/// bfloat16: kBFloat16.
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BFloat16; /**< kBFloat16 */ };

/// Calls f(T{}) with T the C++ type of `t`. `op` names the caller for the error message.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    default: fail<DTypeError>("{}: expected a floating dtype (float32 or float64), got {}", op, dtype_name(t));
  }
}

/// Calls f(T{}) with T the C++ type of a numeric `t` (float, double, int64_t); DTypeError naming `op` otherwise.
template <class F>
decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    default: fail<DTypeError>("{}: expected a numeric dtype (float32, float64 or int64), got {}", op, dtype_name(t));
  }
}

/// Calls f(T{}) with T the C++ type of any `t`.
template <class F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Bool: return f(bool{});
    case DType::BFloat16: return f(bfloat16{});
  }
  return f(float{});
}

}  // namespace attnlab
/// @}

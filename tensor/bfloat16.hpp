/// @file
/// bfloat16: the upper 16 bits of an IEEE float32 (1 sign, 8 exponent, 7 mantissa bits), the
/// element type of mixed-precision matrix products (docs/performance.md, section 11). It has
/// float32's range and 2-3 significant decimal digits.
///
/// float32 -> bfloat16 rounds to nearest, ties to even, on the dropped 16 bits (what PyTorch,
/// oneDNN and the AVX512_BF16 instruction vcvtneps2bf16 do); a NaN stays a NaN (quiet, sign
/// kept) instead of rounding into infinity; overflow rounds to +-inf. bfloat16 -> float32 is
/// exact (a 16-bit shift).
///
/// bfloat16 is a storage type: attnlab converts to and from it, copies, prints, saves and loads
/// it, and multiplies bf16 matrices with float32 results (kernels::matmul). Arithmetic on the
/// struct goes through float, so generic code written for float compiles for it too.
/// @ingroup tensor
#pragma once
#include <bit>
#include <cstdint>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// The bits of x rounded to the nearest bfloat16 (ties to even; a NaN stays a quiet NaN).
constexpr uint16_t float_to_bfloat16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: quiet, keep sign
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// The float32 value of bfloat16 bits (exact).
constexpr float bfloat16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

/// A bfloat16 number: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits).
struct bfloat16 {
  uint16_t bits = 0;  ///< the raw bits

  constexpr bfloat16() = default;
  constexpr explicit bfloat16(float x) : bits(float_to_bfloat16_bits(x)) {}  ///< x rounded to the nearest bfloat16
  static constexpr bfloat16 from_bits(uint16_t b) {  ///< the number with these bits
    bfloat16 v;
    v.bits = b;
    return v;
  }
  constexpr operator float() const { return bfloat16_bits_to_float(bits); }  ///< the exact float32 value
};
static_assert(sizeof(bfloat16) == 2);

/// x rounded to the nearest bfloat16, as a float32 (the value a bf16 matrix product sees).
constexpr float round_to_bfloat16(float x) { return bfloat16_bits_to_float(float_to_bfloat16_bits(x)); }

}  // namespace attnlab
/// @}

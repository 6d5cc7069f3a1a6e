/// @file
/// Seeded random numbers. A Generator is a Philox4x32-10 counter-based generator (Salmon et
/// al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): element i of a draw is a pure
/// function of (seed, offset + i), so a fill is split across threads without changing a bit,
/// and the same seed always gives the same tensors.
/// @ingroup tensor
#pragma once
#include <array>
#include <cstdint>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// A counter-based random generator (Philox 4x32-10): a seed, and an offset counting the draws so far, so its state is two integers.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}  ///< seeded with `seed`, offset 0
  uint64_t seed() const { return seed_; }  ///< the seed
  uint64_t offset() const { return offset_; }  ///< counters used so far
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }  ///< restores a state (checkpoints)
  /// Reserves `n` counters for one draw and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  /// 64 random bits (one counter), e.g. to seed a module's own generator.
  uint64_t next_u64() {
    auto r = philox(seed_, advance(1));
    return uint64_t(r[0]) << 32 | r[1];
  }
  /// 128 random bits for counter `c` under this generator's seed.
  static std::array<uint32_t, 4> philox(uint64_t seed, uint64_t c);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator that modules use when they are not given one, like PyTorch's
/// default generator. manual_seed(s) resets it (seed s, offset 0).
Generator& default_generator();
void manual_seed(uint64_t seed);  ///< resets default_generator() to seed `seed`, offset 0

/// A double in (0, 1) from 64 random bits: never exactly 0 or 1, so log(u) is finite.
inline double bits_to_unit(uint32_t hi, uint32_t lo) {
  uint64_t x = (uint64_t(hi) << 32 | lo) >> 11;  // 53 bits
  return (double(x) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace attnlab
/// @}

/// @file
/// A sequential stream of random numbers on top of attnlab's Philox4x32-10 (tensor/random.hpp),
/// for the data code that draws one number at a time (shuffles, generated tasks).
///
/// The stream for (seed, stream id) reads counters stream_id * 2^32, stream_id * 2^32 + 1, ...
/// under key `seed`, so streams with different ids never overlap (each holds 2^34 32-bit
/// words) and a stream is a pure function of (seed, id): example i of a generated task and the
/// permutation of epoch e are reproducible on their own, in any order and on any thread.
/// @ingroup data
#pragma once
#include <array>
#include <cstdint>
#include <limits>

#include "tensor/random.hpp"

/// @addtogroup data
/// @{
namespace attnlab::data {

/// A stream of random numbers from Philox under (seed, stream id): distinct ids give independent streams.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream_id) : seed_(seed), counter_(stream_id << 32) {}  ///< stream `stream_id` of `seed`

  /// The next 32 random bits.
  uint32_t next_u32() {
    if (left_ == 0) {
      block_ = Generator::philox(seed_, counter_++);
      left_ = 4;
    }
    return block_[--left_];
  }
  /// The next 64 random bits (two next_u32).
  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return hi << 32 | next_u32();
  }
  /// Uniform in [0, n), exactly (rejection of the last partial block of 2^64 values).
  uint64_t below(uint64_t n) {
    const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
  }
  /// Uniform in [lo, hi], both ends included (Python's random.randint).
  int64_t between(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(uint64_t(hi - lo) + 1)); }
  /// Uniform in (0, 1).
  double unit() {
    const uint32_t hi = next_u32();
    return bits_to_unit(hi, next_u32());
  }

 private:
  uint64_t seed_;
  uint64_t counter_;
  std::array<uint32_t, 4> block_{};
  int left_ = 0;
};

}  // namespace attnlab::data
/// @}

/// @file
/// A caching allocator for tensor storage. Freed blocks go back to a per-size-class free list
/// and are handed out again, so a training loop whose tensors have the same sizes every step
/// stops calling the system allocator after its first step. `allocator_stats()` counts both,
/// and the benchmark prints the counts per steady-state step.
/// @ingroup tensor
#pragma once
#include <cstddef>
#include <cstdint>

/// @addtogroup tensor
/// @{
namespace attnlab {

/// Counters of the caching allocator (allocator_stats()).
struct AllocatorStats {
  int64_t system_allocs = 0;   ///< blocks obtained from the system allocator
  int64_t cache_hits = 0;      ///< requests served from the free lists
  int64_t bytes_in_use = 0;    ///< bytes handed out and not yet returned
  int64_t peak_bytes_in_use = 0;  ///< the most bytes in use at once since the last reset_peak_bytes()
  int64_t bytes_cached = 0;    ///< bytes sitting in the free lists
};

AllocatorStats allocator_stats();  ///< the allocator's counters
void reset_peak_bytes();  ///< peak_bytes_in_use starts again from bytes_in_use
/// Returns every cached block to the system.
void empty_cache();

/// The machine's physical memory in bytes (sysconf); no single tensor may ask for more.
int64_t physical_memory_bytes();

/// Blocks are 64-byte aligned; `bytes` is rounded up to the block's size class.
void* storage_alloc(size_t bytes, size_t* capacity);
void storage_free(void* p, size_t capacity);  ///< returns a block from storage_alloc (with the capacity it reported) to the cache

}  // namespace attnlab
/// @}

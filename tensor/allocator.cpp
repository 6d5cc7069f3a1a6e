#include "tensor/allocator.hpp"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include <unistd.h>

namespace attnlab {
namespace {

// Size classes: 64 bytes, then four classes per power of two (64, 80, 96, 112, 128, 160, ...),
// so rounding wastes at most 25%.
constexpr int kClasses = 4 * 48;

int size_class(size_t bytes, size_t* rounded) {
  if (bytes <= 64) { *rounded = 64; return 0; }
  int p = std::bit_width(bytes - 1) - 1;  // 2^p < bytes <= 2^(p+1)
  size_t quarter = size_t{1} << (p - 2);
  size_t k = (bytes - (size_t{1} << p) + quarter - 1) / quarter;  // 1..4
  *rounded = (size_t{1} << p) + k * quarter;
  return (p - 6) * 4 + static_cast<int>(k);
}

struct Cache {
  std::mutex mu;
  std::vector<void*> free_lists[kClasses];
  AllocatorStats stats;
  ~Cache() {
    for (auto& list : free_lists)
      for (void* p : list) std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storage may outlive static destructors
  return *c;
}

}  // namespace

int64_t physical_memory_bytes() {
  static const int64_t bytes = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? int64_t{pages} * page : INT64_MAX;
  }();
  return bytes;
}

void* storage_alloc(size_t bytes, size_t* capacity) {
  size_t rounded;
  int cls = size_class(bytes, &rounded);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    c.stats.bytes_in_use += rounded;
    c.stats.peak_bytes_in_use = std::max(c.stats.peak_bytes_in_use, c.stats.bytes_in_use);
    auto& list = c.free_lists[cls];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      ++c.stats.cache_hits;
      c.stats.bytes_cached -= rounded;
      *capacity = rounded;
      return p;
    }
    ++c.stats.system_allocs;
  }
  // aligned_alloc wants a multiple of the alignment (ASan enforces it); classes like 80 are not.
  void* p = std::aligned_alloc(64, (rounded + 63) & ~size_t{63});
  if (!p) throw std::bad_alloc();
  *capacity = rounded;
  return p;
}

void storage_free(void* p, size_t capacity) {
  size_t rounded;
  int cls = size_class(capacity, &rounded);
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.stats.bytes_in_use -= rounded;
  c.stats.bytes_cached += rounded;
  c.free_lists[cls].push_back(p);
}

AllocatorStats allocator_stats() {
  std::lock_guard lock(cache().mu);
  return cache().stats;
}

void reset_peak_bytes() {
  std::lock_guard lock(cache().mu);
  cache().stats.peak_bytes_in_use = cache().stats.bytes_in_use;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  for (auto& list : c.free_lists) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  c.stats.bytes_cached = 0;
}

}  // namespace attnlab

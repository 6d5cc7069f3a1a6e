#include "tensor/pool.hpp"

#include <new>

namespace attnlab {
namespace {

constexpr int kClasses = static_cast<int>(kPoolMaxBytes / 16);

// The class of a request of `bytes` (1 ... kPoolMaxBytes): classes hold 16, 32, 48, ... bytes.
int class_of(std::size_t bytes) { return bytes == 0 ? 0 : static_cast<int>((bytes - 1) / 16); }
std::size_t class_bytes(int c) { return static_cast<std::size_t>(c + 1) * 16; }

struct FreeBlock {
  FreeBlock* next;
};

// Trivially destructible, so reading it never runs a thread-local guard and it stays readable
// while the thread's destructors run.
struct Lists {
  FreeBlock* head[kClasses];
  int count[kClasses];
  bool reaper_armed;  // this thread's Reaper exists and will empty the lists at thread exit
  bool gone;          // the Reaper has run: bypass the pool from now on
};
thread_local Lists lists{};

struct Reaper {
  ~Reaper() {
    for (int c = 0; c < kClasses; ++c) {
      while (FreeBlock* b = lists.head[c]) {
        lists.head[c] = b->next;
        ::operator delete(b);
      }
      lists.count[c] = 0;
    }
    lists.gone = true;
  }
};

void arm_reaper() {
  static thread_local Reaper reaper;
  (void)reaper;
  lists.reaper_armed = true;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kBypass = true;  // keep ASan's use-after-free checks on these objects
#else
constexpr bool kBypass = false;
#endif

}  // namespace

void* pool_alloc(std::size_t bytes) {
  if (kBypass || bytes > kPoolMaxBytes) return ::operator new(bytes);
  const int c = class_of(bytes);
  // Even with the lists gone (thread exit), the block has its class's size: another thread may
  // free it into its own lists and hand it out for any request of the class.
  if (FreeBlock* b = lists.gone ? nullptr : lists.head[c]) {
    lists.head[c] = b->next;
    --lists.count[c];
    return b;
  }
  return ::operator new(class_bytes(c));
}

void pool_free(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  if (kBypass || bytes > kPoolMaxBytes || lists.gone) {
    ::operator delete(p);
    return;
  }
  const int c = class_of(bytes);
  if (lists.count[c] >= kPoolMaxBlocks) {
    ::operator delete(p);
    return;
  }
  if (!lists.reaper_armed) arm_reaper();
  auto* b = static_cast<FreeBlock*>(p);
  b->next = lists.head[c];
  lists.head[c] = b;
  ++lists.count[c];
}

}  // namespace attnlab

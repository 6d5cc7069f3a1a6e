// The small-object pool (tensor/pool.hpp): blocks are reused per size class, survive being
// freed on another thread, large requests bypass it, and it backs std::allocate_shared and
// containers. Under AddressSanitizer the pool is a plain operator new/delete, so the reuse
// checks there only ask for valid, distinct memory.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "tensor/pool.hpp"
#include "tensor_testing.hpp"

using namespace attnlab;

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooled = false;
#else
constexpr bool kPooled = true;
#endif
}  // namespace

TEST_CASE("pool: a freed block is handed out again for a request of the same class") {
  void* a = pool_alloc(100);  // class 112
  std::memset(a, 0xAB, 100);
  pool_free(a, 100);
  void* b = pool_alloc(112);  // same class
  if (kPooled) CHECK(b == a);
  void* c = pool_alloc(100);  // the list is empty again: a new block
  CHECK(c != b);
  std::memset(b, 1, 112);
  std::memset(c, 2, 100);
  CHECK(static_cast<unsigned char*>(b)[111] == 1);
  pool_free(b, 112);
  pool_free(c, 100);
}

TEST_CASE("pool: different classes do not share blocks, large requests bypass the lists") {
  void* small = pool_alloc(16);
  pool_free(small, 16);
  void* other = pool_alloc(32);  // class 32: not the freed 16-byte block
  CHECK(other != small);
  void* big = pool_alloc(kPoolMaxBytes + 1);
  std::memset(big, 3, kPoolMaxBytes + 1);
  pool_free(big, kPoolMaxBytes + 1);
  pool_free(other, 32);
  pool_free(nullptr, 64);  // allowed, like operator delete(nullptr)
}

TEST_CASE("pool: blocks freed on another thread, and a thread's lists at its exit") {
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) {
    blocks.push_back(pool_alloc(48));
    std::memset(blocks.back(), i & 0xFF, 48);
  }
  std::thread worker([&] {
    for (void* p : blocks) pool_free(p, 48);  // join the worker's lists, emptied when it exits
    for (int i = 0; i < 100; ++i) pool_free(pool_alloc(200), 200);
  });
  worker.join();
  // This thread allocates afresh; nothing freed by the worker is handed out twice.
  std::vector<void*> again;
  for (int i = 0; i < 1000; ++i) again.push_back(pool_alloc(48));
  std::sort(again.begin(), again.end());
  CHECK(std::adjacent_find(again.begin(), again.end()) == again.end());
  for (void* p : again) pool_free(p, 48);
}

TEST_CASE("pool: make_pooled and PoolVector behave like make_shared and std::vector") {
  struct Counted {
    int* live;
    explicit Counted(int* l) : live(l) { ++*live; }
    ~Counted() { --*live; }
  };
  int live = 0;
  {
    std::shared_ptr<Counted> p = make_pooled<Counted>(&live);
    std::weak_ptr<Counted> w = p;
    CHECK(live == 1);
    p.reset();
    CHECK(live == 0);  // destroyed with the last reference, the block kept until the weak one goes
    CHECK(w.expired());
  }
  PoolVector<int64_t> v;
  for (int64_t i = 0; i < 5000; ++i) v.push_back(i * i);  // grows past kPoolMaxBytes
  int64_t sum = 0;
  for (int64_t x : v) sum += x;
  CHECK(sum == 4999LL * 5000 * 9999 / 6);
}

// Recording ops and running backward call no system allocator in steady state: tensor handles,
// graph nodes, their edge/shape vectors, autograd metadata and the gradients a formula returns
// come from the small-object pool (tensor/pool.hpp), tensor data from the caching allocator.
// Counted by replacing the global operator new in this test executable (not under
// AddressSanitizer, whose own operator new must stay in place; there the pool bypasses itself
// and only the gradients are checked).
#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "grad_helpers.hpp"

#if !defined(__SANITIZE_ADDRESS__)
namespace {
std::atomic<long> news{0};
}
void* operator new(std::size_t n) {
  news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
constexpr bool kCounting = true;
long news_now() { return news.load(); }
#else
constexpr bool kCounting = false;
long news_now() { return 0; }
#endif

using namespace attnlab;
using namespace attnlab::testing;

TEST_CASE("allocations: tiny ops forward and backward allocate nothing once warm") {
  Tensor a = t64({1.0, 2.0, 3.0, 4.0}, {4}).requires_grad_();
  Tensor b = t64({0.5, -1.0, 2.0, 0.0}, {4}).requires_grad_();
  Tensor c = t64({1.0}, {1}).requires_grad_();  // broadcast: the engine reduces its gradient
  auto step = [&] {
    a.set_grad(Tensor());
    b.set_grad(Tensor());
    c.set_grad(Tensor());
    Tensor loss = sum(exp(a * b + c) / 4.0);
    loss.backward();
  };
  for (int i = 0; i < 3; ++i) step();
  const long before = news_now();
  for (int i = 0; i < 20; ++i) step();
  if (kCounting) CHECK(news_now() - before == 0);
  // The gradients are still right: d/da = b e^(ab+c)/4, d/dc = sum e^(ab+c)/4.
  Tensor e = exp(a.detach() * b.detach() + c.detach()) / 4.0;
  CHECK(allclose(a.grad(), e * b.detach()));
  CHECK(allclose(b.grad(), e * a.detach()));
  CHECK(allclose(c.grad(), reshape(sum(e), {1})));
}

TEST_CASE("allocations: freeing a long graph allocates nothing and never recurses deeply") {
  Tensor x = t64({1.0}, {1}).requires_grad_();
  auto chain = [&](int n) {
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = y * 1.0;
    return y;
  };
  { Tensor warm = chain(1000); }
  const long before = news_now();
  { Tensor y = chain(1000); }  // 1000 nodes freed through the drain stack
  if (kCounting) CHECK(news_now() - before == 0);
  Tensor deep = chain(200000);  // deep enough to overflow a recursive destructor
  deep = Tensor();
  CHECK(x.grad_fn() == nullptr);
  // Both edges of y * y hold the node before: neither is its last reference on its own.
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y * y;
  CHECK(y.item() == 1.0);
  y = Tensor();
  // A graph freed on a thread that then exits: its pool lists and drain stack are emptied then.
  Tensor z = chain(1000);
  std::thread([z = std::move(z)]() mutable { z = Tensor(); }).join();
}

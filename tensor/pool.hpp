/// @file
/// A small-object pool for the engine's bookkeeping: tensor handles (TensorImpl), storage
/// headers, autograd metadata, graph nodes and their per-input vectors. Every op creates a few
/// of these and every backward frees them, so with the system allocator a tiny op costs several
/// malloc/free pairs; with the pool it costs a push and a pop on a per-thread free list.
///
/// Blocks are sized in 16-byte classes up to kPoolMaxBytes; larger requests go to operator new.
/// Each thread keeps its own lists, so no lock is taken. A block freed on another thread than
/// the one that allocated it joins the freeing thread's list: blocks of one class are
/// interchangeable (each was obtained from operator new at its class size). A thread's lists are
/// capped (kPoolMaxBlocks per class; beyond it blocks go back to operator delete) and are emptied
/// when the thread exits.
///
/// Tensor storage (the data) does not come from here: it has its own caching allocator
/// (allocator.hpp), whose statistics the benchmark reports. Under AddressSanitizer the pool is
/// a plain operator new/delete, so that use-after-free of these objects is still caught.
/// @ingroup tensor
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

/// @addtogroup tensor
/// @{
namespace attnlab {

inline constexpr std::size_t kPoolMaxBytes = 1024;  ///< the largest request the pool serves; larger ones go to operator new
inline constexpr int kPoolMaxBlocks = 4096;  ///< free blocks a thread keeps per size class

void* pool_alloc(std::size_t bytes);  ///< a block of at least `bytes` from this thread's lists (see above)
void pool_free(void* p, std::size_t bytes) noexcept;  ///< returns a block of pool_alloc(bytes) to this thread's lists

/// The pool as a standard allocator, for std::allocate_shared and containers.
template <class T>
struct PoolAllocator {
  using value_type = T;  ///< the element type
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  ///< every PoolAllocator is interchangeable
  T* allocate(std::size_t n) { return static_cast<T*>(pool_alloc(n * sizeof(T))); }  ///< pool_alloc of n elements
  void deallocate(T* p, std::size_t n) noexcept { pool_free(p, n * sizeof(T)); }  ///< pool_free of n elements
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept { return true; }  ///< always true: one pool
};

template <class T>
using PoolVector = std::vector<T, PoolAllocator<T>>;  ///< a vector whose buffer comes from the pool

/// std::make_shared, with the object and its control block in one pool block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace attnlab
/// @}

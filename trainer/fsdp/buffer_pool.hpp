// BufferPool: the memory behind FSDP's gathered (unsharded) parameter buffers on CPU, taken straight from
// the kernel with mmap and given back with munmap, so that freeing a unit's parameters really lowers the
// process's resident memory (glibc would keep large freed blocks in its heap).
//
// Re-gathering a unit every step would then pay page faults for every page of it, so the pool caches up
// to `max_cached_bytes` of released buffers for reuse (exact sizes: all blocks are one size). The owner sets
// that cap to what the strategy holds gathered at its peak anyway (FULL_SHARD: the root, the computing unit
// and the prefetched ones), so the cache never raises the peak; anything beyond it is unmapped at once.
// Buffers are 2 MiB aligned and advised MADV_HUGEPAGE: a fault maps 2 MiB where the kernel allows it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include <c10/core/Allocator.h>

namespace meshrun::trainer {

class BufferPool {
 public:
  BufferPool();
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A CPU buffer of `nbytes` whose deleter returns it to this pool (or unmaps it when the pool is gone or
  /// full). Safe to outlive the pool. Throws c10::Error when the kernel refuses the mapping.
  at::DataPtr allocate(size_t nbytes);
  /// Released buffers kept for reuse at most (default 0: every release unmaps).
  void set_max_cached_bytes(size_t bytes);
  /// Unmaps every cached buffer.
  void trim();
  size_t cached_bytes() const;
  /// Bytes currently mapped by this pool: handed out + cached.
  size_t mapped_bytes() const;

  struct State;  // shared with the buffers' deleters, which may outlive the pool

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meshrun::trainer

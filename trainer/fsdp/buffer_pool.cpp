#include "trainer/fsdp/buffer_pool.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <c10/util/Exception.h>

namespace meshrun::trainer {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A 2 MiB aligned anonymous mapping of `len` bytes (len a multiple of 2 MiB).
void* map_aligned(size_t len) {
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(raw != MAP_FAILED, "BufferPool: mmap of ", len, " bytes failed: ", std::strerror(errno));
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = round_up(begin, kHugePage);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t tail = aligned + len;
  const uintptr_t end = begin + len + kHugePage;
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
  ::madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // advisory: ignored where THP is off
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

struct BufferPool::State {
  struct Buffer {
    void* ptr;
    size_t len;
  };
  mutable std::mutex mutex;
  std::vector<Buffer> cached;  // released, still mapped
  size_t cached_bytes = 0;
  size_t max_cached_bytes = 0;
  size_t mapped_bytes = 0;
  bool alive = true;

  // Called by a buffer's deleter: keep it for reuse if it fits under the cap, else unmap it.
  void release(void* ptr, size_t len) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (alive && cached_bytes + len <= max_cached_bytes) {
        cached.push_back({ptr, len});
        cached_bytes += len;
        return;
      }
      mapped_bytes -= len;
    }
    ::munmap(ptr, len);
  }
};

namespace {

// The DataPtr context: which pool the buffer goes back to.
struct Lease {
  std::shared_ptr<BufferPool::State> state;
  void* ptr;
  size_t len;
};

void return_lease(void* ctx) {
  auto* lease = static_cast<Lease*>(ctx);
  lease->state->release(lease->ptr, lease->len);
  delete lease;
}

}  // namespace

BufferPool::BufferPool() : state_(std::make_shared<State>()) {}

BufferPool::~BufferPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->alive = false;  // buffers still out are unmapped when released
  }
  trim();
}

at::DataPtr BufferPool::allocate(size_t nbytes) {
  const size_t len = round_up(std::max<size_t>(nbytes, 1), kHugePage);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (size_t i = 0; i < state_->cached.size(); ++i) {
      if (state_->cached[i].len == len) {
        ptr = state_->cached[i].ptr;
        state_->cached.erase(state_->cached.begin() + static_cast<std::ptrdiff_t>(i));
        state_->cached_bytes -= len;
        break;
      }
    }
  }
  if (ptr == nullptr) {
    ptr = map_aligned(len);
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->mapped_bytes += len;
  }
  return {ptr, new Lease{state_, ptr, len}, &return_lease, at::Device(at::kCPU)};
}

void BufferPool::set_max_cached_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->max_cached_bytes = bytes;
}

void BufferPool::trim() {
  std::vector<State::Buffer> drop;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    drop.swap(state_->cached);
    state_->cached_bytes = 0;
    for (const auto& b : drop) state_->mapped_bytes -= b.len;
  }
  for (const auto& b : drop) ::munmap(b.ptr, b.len);
}

size_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->cached_bytes;
}

size_t BufferPool::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->mapped_bytes;
}

}  // namespace meshrun::trainer

// MemfdSlot: one memory-copy slot, an anonymous memory file (memfd) of fixed size that the agent lends its
// worker. Its pages belong to whoever still holds the descriptor: the agent and its workers only, so nothing
// outlives them (no /dev/shm file to unlink after a kill -9). Sealed against shrinking and growing, so a
// worker cannot truncate it under the agent.
#pragma once

#include <cstdint>
#include <string>

#include "common/unique_fd.hpp"
#include "proto/worker/memory_copy.hpp"

namespace meshrun::launcher {

class MemfdSlot {
 public:
  /// Creates and allocates `bytes` (rounded up to 4 KiB). `name` shows in /proc/<pid>/fd. Throws
  /// std::runtime_error naming errno (ENOMEM, ENOSPC: not enough memory for the copies).
  MemfdSlot(const std::string& name, uint64_t bytes);

  /// The size a slot asked for `bytes` has: rounded up to 4 KiB.
  static uint64_t rounded(uint64_t bytes) {
    return (bytes + proto::kHeaderBytes - 1) / proto::kHeaderBytes * proto::kHeaderBytes;
  }

  int fd() const { return fd_.get(); }
  uint64_t bytes() const { return bytes_; }
  /// The copy's header as the worker last wrote it (pread, no mapping).
  proto::CopyHeader read_header() const;
  /// validate_header over this slot: "" when it holds a sealed, consistent copy.
  std::string check() const;

 private:
  UniqueFd fd_;
  uint64_t bytes_ = 0;
};

}  // namespace meshrun::launcher

// pread_full: a positional read that does not stop early (EINTR and short reads retried).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace meshrun {

/// Reads n bytes at `offset` into dst. Returns n, fewer when the file ends first, or -1 with errno set on a
/// read error.
inline ssize_t pread_full(int fd, void* dst, size_t n, uint64_t offset) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace meshrun

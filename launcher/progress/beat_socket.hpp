// BeatSocket: the agent's end of one worker's progress channel, a Unix datagram socket bound to a path
// (the worker's MESHRUN_PROGRESS). Datagrams need no connection and a worker that sends with
// SOCK_NONBLOCK never waits for the agent. Non-blocking here too; the path is unlinked on destruction.
#pragma once

#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

class BeatSocket {
 public:
  /// Binds `path` (removing a stale socket file there first); throws Error naming the path on failure.
  explicit BeatSocket(std::string path);
  ~BeatSocket();
  BeatSocket(BeatSocket&&) noexcept = default;
  BeatSocket& operator=(BeatSocket&&) = delete;
  BeatSocket(const BeatSocket&) = delete;
  BeatSocket& operator=(const BeatSocket&) = delete;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  /// Every datagram waiting now (oldest first), without blocking.
  std::vector<std::string> drain();
  /// Sends one datagram to the socket bound at `path` (a worker's hook), without waiting: 0, or the errno.
  int send_to(const std::string& path, const std::string& text) const;

 private:
  std::string path_;
  UniqueFd fd_;
};

}  // namespace meshrun::launcher

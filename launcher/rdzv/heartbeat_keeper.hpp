// HeartbeatKeeper: keeps the node's heartbeats going on a thread of its own while the agent's loop is busy
// for longer than a keep-alive interval (reading stacks, a hang inquiry, stopping workers for up to
// --shutdown-timeout), so the rendezvous never declares a working node dead. While it lives, every other
// use of the backend goes through with_rendezvous() (the backend is not thread-safe).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "launcher/rdzv/rendezvous_backend.hpp"

namespace meshrun::launcher {

class HeartbeatKeeper {
 public:
  /// Starts beating every `every`, each carrying `progress` (the ranks' last summaries).
  HeartbeatKeeper(RendezvousBackend& rdzv, std::chrono::milliseconds every, std::vector<proto::RankProgress> progress);
  ~HeartbeatKeeper();
  HeartbeatKeeper(const HeartbeatKeeper&) = delete;
  HeartbeatKeeper& operator=(const HeartbeatKeeper&) = delete;

  template <typename F>
  auto with_rendezvous(F&& f) {
    const std::lock_guard lock(mutex_);
    return f(rdzv_);
  }
  /// Heartbeats sent so far (tests and logs).
  int sent() const;

 private:
  void run();

  RendezvousBackend& rdzv_;
  std::chrono::milliseconds every_;
  std::vector<proto::RankProgress> progress_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  int sent_ = 0;
  std::thread thread_;
};

}  // namespace meshrun::launcher

#include "launcher/rdzv/heartbeat_keeper.hpp"

#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace meshrun::launcher {

HeartbeatKeeper::HeartbeatKeeper(RendezvousBackend& rdzv, std::chrono::milliseconds every,
                                 std::vector<proto::RankProgress> progress)
    : rdzv_(rdzv), every_(every), progress_(std::move(progress)), thread_([this] { run(); }) {}

HeartbeatKeeper::~HeartbeatKeeper() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int HeartbeatKeeper::sent() const {
  const std::lock_guard lock(mutex_);
  return sent_;
}

void HeartbeatKeeper::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, every_, [this] { return stop_; })) {
    try {
      // The reply's action waits for the agent's loop: it is busy ending this attempt anyway.
      rdzv_.heartbeat(progress_, {});
      ++sent_;
    } catch (const std::exception& e) {  // nothing may escape this thread
      spdlog::warn("heartbeat while the agent was busy failed: {}", e.what());
    } catch (...) {
      spdlog::warn("heartbeat while the agent was busy failed");
    }
  }
}

}  // namespace meshrun::launcher

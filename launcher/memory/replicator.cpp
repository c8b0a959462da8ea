#include "launcher/memory/replicator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/peer_link.hpp"

namespace meshrun::launcher {

Replicator::Replicator(MemoryKeeper& keeper) : keeper_(keeper) {
  thread_ = std::thread([this] { run(); });
}

Replicator::~Replicator() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Replicator::enqueue(int rank, int64_t step) {
  {
    std::lock_guard lock(mutex_);
    std::erase_if(queue_, [rank](const auto& job) { return job.first == rank; });
    queue_.emplace_back(rank, step);
  }
  changed_.notify_all();
}

void Replicator::run() {
  for (;;) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const auto [rank, step] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    push(rank, step);
  }
}

void Replicator::push(int rank, int64_t step) {
  const auto buddy = keeper_.buddy();
  if (!buddy) return;  // alone, or its inventory never came: nothing to push to this round
  auto copy = keeper_.take_for_push(rank, step);
  if (!copy) return;  // overwritten meanwhile: a newer commit follows
  const auto started = std::chrono::steady_clock::now();
  std::string why;
  try {
    const UniqueFd peer = connect_peer(buddy->addr, buddy->port);
    send_frame(peer.get(), {{"op", "push"},
                            {"run", keeper_.run_id()},
                            {"rank", rank},
                            {"step", step},
                            {"world_size", copy->world_size},
                            {"digest", copy->digest},
                            {"bytes", copy->bytes}});
    nlohmann::json reply = receive_frame(peer.get());
    if (reply.value("go", false)) {
      // Test hook (agent side): the push pauses halfway through, as a slow network would.
      uint64_t sent = 0;
      if (const char* slow = std::getenv("MESHRUN_FAULT_SLOW_REPLICATION"); slow != nullptr && *slow != '\0') {
        sent = copy->bytes / 2;
        send_copy(peer.get(), copy->fd.get(), sent);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(slow)));
      }
      send_copy(peer.get(), copy->fd.get(), copy->bytes, sent);
      reply = receive_frame(peer.get());
    }
    if (!reply.value("ok", false)) why = reply.value("error", reply.dump());
  } catch (const std::exception& e) {
    why = e.what();
  }
  keeper_.pushed(rank, step, why.empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (why.empty()) {
    failing_ = false;
    spdlog::info("memory: rank {}'s copy of step {} is on node {} ({}) after {:.2f} s", rank, step, buddy->node,
                 buddy->host, seconds);
  } else if (!failing_) {
    failing_ = true;
    spdlog::warn("memory: cannot push rank {}'s copy of step {} to node {} ({}): {}", rank, step, buddy->node,
                 buddy->host, why);
  }
}

}  // namespace meshrun::launcher

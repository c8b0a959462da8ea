#include "launcher/memory/replicator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/peer_auth.hpp"
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
    pending_[rank] = Pending{step, Clock::now(), 0};
  }
  changed_.notify_all();
}

void Replicator::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    // The job due first; none: wait for one.
    auto next = pending_.end();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (next == pending_.end() || it->second.due < next->second.due) next = it;
    }
    if (next == pending_.end()) {
      changed_.wait(lock);
      continue;
    }
    if (next->second.due > Clock::now()) {
      changed_.wait_until(lock, next->second.due);
      continue;
    }
    const int rank = next->first;
    const int64_t step = next->second.step;
    lock.unlock();
    const bool done = push(rank, step);
    lock.lock();
    auto& job = pending_[rank];
    if (job.step != step) continue;  // a newer commit came meanwhile: it is due now
    if (done) {
      pending_.erase(rank);
    } else {
      ++job.failures;
      job.due = Clock::now() + std::chrono::seconds(std::min(5, job.failures));
    }
  }
}

bool Replicator::push(int rank, int64_t step) {
  const auto buddy = keeper_.buddy();
  if (!buddy) return false;  // its inventory has not come (yet): tried again
  auto copy = keeper_.take_for_push(rank, step);
  if (!copy) return true;  // overwritten or dropped meanwhile: nothing left to push
  const auto started = std::chrono::steady_clock::now();
  std::string why;
  try {
    const PeerConnection peer =
        open_peer_request(buddy->addr, buddy->port, keeper_.copy_key(),
                          proto::CopyPortRequest::push(keeper_.run_id(), rank, step, copy->round, copy->world_size,
                                                       copy->digest, copy->bytes));
    auto reply = receive_frame(peer.get()).get<proto::CopyPortReply>();
    if (reply.kind == proto::CopyPortReply::Kind::kGo) {
      // Test hook (agent side): the push pauses halfway through, as a slow network would.
      Poly1305 mac(peer.data_key);
      uint64_t sent = 0;
      if (const char* slow = std::getenv("MESHRUN_FAULT_SLOW_REPLICATION"); slow != nullptr && *slow != '\0') {
        sent = copy->bytes / 2;
        send_copy(peer.get(), copy->fd.get(), sent, mac);
        std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(slow)));
      }
      send_copy(peer.get(), copy->fd.get(), copy->bytes, mac, sent);
      send_copy_tag(peer.get(), mac);
      reply = receive_frame(peer.get()).get<proto::CopyPortReply>();
    }
    using Kind = proto::CopyPortReply::Kind;
    if (reply.kind != Kind::kOk && reply.kind != Kind::kHave)
      why = reply.kind == Kind::kError ? reply.error : "the buddy asked for the bytes twice";
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
    spdlog::warn("memory: cannot push rank {}'s copy of step {} to node {} ({}): {}; trying again", rank, step,
                 buddy->node, buddy->host, why);
  }
  return why.empty();
}

}  // namespace meshrun::launcher

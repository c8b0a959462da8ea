// Replicator: pushes each committed copy of this node's ranks to the next node of the round's ring (its
// buddy: node g+1 of N), off every worker's path, on its own thread. On the buddy's ack the rank's control
// block says so, and the workers agree through their step's all-reduce that the step is durable (on every
// buddy). A push that fails (the buddy busy, unreachable, or not published yet) is tried again a second
// later, and then every few seconds, until it lands or a newer commit of the rank replaces it: until then
// the agent keeps the durable step's slot, so copies are skipped rather than the fallback lost. A failure
// streak is logged once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace meshrun::launcher {

class MemoryKeeper;

class Replicator {
 public:
  explicit Replicator(MemoryKeeper& keeper);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  /// Pushes `rank`'s committed copy of `step` (a newer one of the same rank replaces it).
  void enqueue(int rank, int64_t step);

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    int64_t step = 0;
    Clock::time_point due{};
    int failures = 0;
  };

  void run();
  /// One push; true when the buddy holds the copy (or nothing is left to push).
  bool push(int rank, int64_t step);

  MemoryKeeper& keeper_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, Pending> pending_;  // per rank: the newest committed copy not yet on the buddy
  bool stop_ = false;
  bool failing_ = false;  // the last push failed: the next failure is not logged again
  std::thread thread_;
};

}  // namespace meshrun::launcher

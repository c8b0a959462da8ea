// Replicator: pushes each committed copy of this node's ranks to the next node of the round's ring (its
// buddy: node g+1 of N), off every worker's path, on its own thread. On the buddy's ack the rank's control
// block says so, and the workers agree through their step's all-reduce that the step is durable (on every
// buddy). A push that fails is logged once per streak and the next commit tries again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace meshrun::launcher {

class MemoryKeeper;

class Replicator {
 public:
  explicit Replicator(MemoryKeeper& keeper);
  ~Replicator();
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  /// Pushes `rank`'s committed copy of `step` (a newer one of the same rank replaces it in the queue).
  void enqueue(int rank, int64_t step);

 private:
  void run();
  void push(int rank, int64_t step);

  MemoryKeeper& keeper_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<int, int64_t>> queue_;
  bool stop_ = false;
  bool failing_ = false;  // the last push failed: the next failure is not logged again
  std::thread thread_;
};

}  // namespace meshrun::launcher

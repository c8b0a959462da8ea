// AttemptClock: how far this node's attempt got since its workers spawned (proto::AttemptMilestones), read
// from the ranks' summaries the agent already keeps: a rank is up at its first beat or first completed
// collective; meshrun-trainer beats "load" before restoring a checkpoint and "ready" after; a rank's first
// step is its first step beat, or, for a rank that does not beat, its second completed collective (the
// first after the one that set the job up). The daemon times each restart's phases from these.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

class AttemptClock {
 public:
  using Clock = std::chrono::steady_clock;

  /// `ranks`: how many local ranks the node runs; `spawned`: when the last of them was started.
  AttemptClock(int64_t round, size_t ranks, Clock::time_point spawned);

  /// Notes the marks the summaries show now (call often: a mark is dated when first seen).
  void observe(const std::vector<proto::RankProgress>& summaries, Clock::time_point now);
  /// The node's marks as ages at `now` (a mark counts once every local rank reached it).
  proto::AttemptMilestones milestones(Clock::time_point now) const;
  /// Every mark reached: nothing left to observe.
  bool settled() const;

 private:
  struct RankMarks {
    std::optional<Clock::time_point> up, ready, first_step;
    bool loads = false;  // it beat "load" (or "ready")
  };
  /// The last local rank's mark, or nothing while one has not reached it.
  std::optional<Clock::time_point> last_of(std::optional<Clock::time_point> RankMarks::*mark, bool loading_only) const;

  int64_t round_;
  size_t ranks_;
  Clock::time_point spawned_;
  std::map<int, RankMarks> marks_;  // by global rank
};

}  // namespace meshrun::launcher

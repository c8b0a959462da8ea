// RankTracker: what the agent knows about one rank's progress, from the beats its worker sent: the last
// beat, when it came, and a window of recent per-step times (and compute times, when reported).
#pragma once

#include <chrono>
#include <deque>
#include <optional>

#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/worker/progress_beat.hpp"

namespace meshrun::launcher {

class RankTracker {
 public:
  using Clock = std::chrono::steady_clock;
  /// Step intervals kept for the medians: long enough that one slow step does not move them.
  static constexpr size_t kWindow = 20;

  explicit RankTracker(int rank) : rank_(rank) {}

  void on_beat(const proto::Beat& beat, Clock::time_point now);

  int rank() const { return rank_; }
  bool has_beaten() const { return last_.has_value(); }
  const proto::Beat& last() const { return *last_; }  // only when has_beaten()
  Clock::time_point last_at() const { return last_at_; }
  /// Step intervals seen (a beat whose step moved forward ends one).
  int intervals() const { return intervals_; }
  /// Median seconds per step over the window; nullopt before the first interval.
  std::optional<double> median_step_s() const;
  /// Median compute_s over the window; nullopt when the worker reports none.
  std::optional<double> median_compute_s() const;
  /// What the agent sends the daemon with its heartbeat.
  proto::RankProgress summary(Clock::time_point now, bool hung) const;

 private:
  int rank_;
  std::optional<proto::Beat> last_;
  Clock::time_point last_at_{};
  Clock::time_point step_at_{};  // when the current step value was first seen
  int intervals_ = 0;
  std::deque<double> step_s_;
  std::deque<double> compute_s_;
};

}  // namespace meshrun::launcher

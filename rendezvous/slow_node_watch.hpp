// SlowNodeWatch: a run's slow nodes over time, for --replace-slow-nodes. It keeps how long each node's ranks have
// been named stragglers without a break, when a rank last beat a checkpoint phase, the nodes evicted (with the
// figures the rule weighed, for status, the page and /metrics) and their cool-downs, and asks
// proto/rules/slow_node_rule.hpp at each heartbeat of a closed round. Membership acts on an eviction. Pure:
// times come in as arguments, on the daemon's Clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/rules/slow_node_rule.hpp"

namespace meshrun::rendezvous {

/// A node named slow now, keyed by what stays the same when its agent re-joins ("host/pid").
struct NamedSlowNode {
  std::string identity;
  proto::SlowNode node;  // slow_for_s is the watch's to fill
};

/// What the run knows besides who is slow, at the heartbeat the watch is asked at.
struct SlowNodeContext {
  proto::SlowNodePolicy policy;
  int spares = 0;              // hot spares that may take a seat now
  bool beats = false;          // the ranks beat their steps (the work since a checkpoint can be told)
  bool checkpointing = false;  // some rank's last beat names a checkpoint phase
  double recovery_s = -1;      // the last restart's recovery (-1: none complete)
};

class SlowNodeWatch {
 public:
  /// The round closed at `now`: the work since it counts as work a restart does again (until a checkpoint).
  void round_closed(TimePoint now) {
    attempt_started_ = now;
    last_checkpoint_.reset();
  }
  /// The run restarted: the straggler names start afresh, and so do the streaks. A node counts as slow alone, for
  /// the rule's sustained time, only after the last moment more than one node was named.
  void restarted();
  /// The rule's decision for the nodes named now (`named`), at `now`. Keeps the line of a decision that keeps a
  /// slow node in its seat, said once per streak and verdict (note()).
  proto::SlowNodeDecision update(const std::vector<NamedSlowNode>& named, const SlowNodeContext& context,
                                 TimePoint now);
  /// The node `identity` was evicted at `now` in `round` for `decision`: it cools down for `cooldown_s`.
  void evicted(const std::string& identity, const proto::SlowNodeDecision& decision, int64_t round, double cooldown_s,
               TimePoint now);
  /// Seconds before the node `identity` may be a spare again (0: it may).
  double cooldown_left(const std::string& identity, TimePoint now) const;
  /// Why a slow node keeps its seat in this streak ("" when none does).
  const std::string& note() const { return note_; }
  /// The evictions, their count and the note, into `status`.
  void fill(proto::RunStatus& status, TimePoint now) const;

 private:
  /// A node named slow without a break: since when, and its figure at each heartbeat since (the slowdown weighed is
  /// their median: one reading can be far off, either way, under a CPU quota).
  struct Streak {
    TimePoint since;
    std::vector<double> ratios;
  };
  static constexpr size_t kMaxRatios = 1024;  // the streak's latest figures

  std::map<std::string, Streak> streaks_;  // identity -> its streak
  std::optional<TimePoint> several_at_;    // when more than one node was last named at once: a streak counts after
  std::optional<proto::SlowNodeVerdict> noted_;  // the verdict whose line is the note (once per streak)
  std::string note_;
  TimePoint attempt_started_{};
  std::optional<TimePoint> last_checkpoint_;
  std::map<std::string, TimePoint> cooling_until_;  // identity -> end of its cool-down
  struct Eviction {
    proto::SlowNodeEviction record;
    std::string identity;
    TimePoint at;
  };
  std::vector<Eviction> evictions_;  // the latest kMaxRestartRecords
  int64_t eviction_count_ = 0;
};

}  // namespace meshrun::rendezvous

// RecoveryTimeline: one restart timed phase by phase, from what the daemon sees (failure reports, the
// round's invalidation, re-joins, the close) and what agents report in their heartbeats (their workers'
// milestones, as ages). Pure: times come in as arguments, on the daemon's Clock.
//
//   fault --detect--> known --stop--> survivors back --rendezvous--> closed --start--> spawned
//         --init--> initialized --load--> loaded --first step--> first step
//
// Each boundary of the agents' phases is the last node's: the job runs when every node does.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::rendezvous {

class RecoveryTimeline {
 public:
  /// The round was invalidated at `now` for a fault that happened at `fault` and was first known at
  /// `known` (a failure report's arrival, or now).
  RecoveryTimeline(TimePoint fault, TimePoint known, TimePoint now);

  /// A survivor of the last round re-joined (its workers are gone): the stop phase lasts until the last.
  void survivor_back(TimePoint at);
  /// The next round closed with `nodes` (node ids).
  void closed(TimePoint at, std::vector<std::string> nodes);
  /// A node's milestones of the closed round, received at `at` (its ages are before `at`).
  void milestones(const std::string& node, const proto::AttemptMilestones& attempt, TimePoint at);

  /// The phases so far (complete once every phase that can be told was reached).
  proto::RecoveryLedger ledger() const;
  bool complete() const { return ledger().complete; }

 private:
  struct NodeMarks {
    std::optional<TimePoint> spawned, initialized, loaded, first_step;
    bool load_beats = false;
    proto::LoadSource load_source = proto::LoadSource::kUnknown;
  };
  /// The last node's mark, or nothing while a node has not reached it.
  std::optional<TimePoint> last_of(std::optional<TimePoint> NodeMarks::*mark) const;

  TimePoint fault_;
  TimePoint known_;
  TimePoint invalidated_;
  std::optional<TimePoint> survivors_back_;
  std::optional<TimePoint> closed_;
  std::vector<std::string> nodes_;
  std::map<std::string, NodeMarks> marks_;
};

}  // namespace meshrun::rendezvous

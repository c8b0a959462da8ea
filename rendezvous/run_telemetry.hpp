// RunTelemetry: what the daemon measures of a run beside deciding its rounds. Membership tells it what
// happened (a fault reported, a restart, a round closed, a heartbeat's progress and milestones) and reads
// its figures into status, heartbeat replies and leave replies; none of it decides who is in a round.
//   restarts   the latest kMaxRestartRecords with their causes, counts by cause and hangs by verdict kind
//   recovery   the latest restart timed phase by phase (recovery_timeline.hpp), from its fault on
//   goodput    the run's wall time split (proto/rules/goodput_ledger.hpp) and the steps beaten so far
//   stragglers the slow ranks, from beats and collective arrival times (straggler.hpp, arrival_timing.hpp)
// Pure: times come in as arguments, on the daemon's Clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/rules/goodput_ledger.hpp"
#include "rendezvous/arrival_timing.hpp"
#include "rendezvous/recovery_timeline.hpp"
#include "rendezvous/straggler.hpp"

namespace meshrun::rendezvous {

class RunTelemetry {
 public:
  explicit RunTelemetry(TimePoint started = {}) : goodput_(started) {}

  /// A failure of the closed round that happened at `at`, reported at `now`: the earliest is the next
  /// restart's fault.
  void fault(TimePoint at, TimePoint now);
  /// A hang reported, counted by its verdict's kind ("" reads "beats", the kind before verdicts had one).
  void hang(const std::string& kind);
  /// The run restarts into `round` for `cause` at `now`. Its fault: the first failure reported, else
  /// `lost_node_last_seen` (the lost node died after its last heartbeat).
  void restarted(int64_t round, proto::RestartCause cause, const std::string& reason, TimePoint lost_node_last_seen,
                 TimePoint now);
  /// A survivor of the last round re-joined.
  void survivor_back(TimePoint now);
  /// `round` closed with `nodes`; `replaced` ("spare host-d (pid 7) took node rank 1", or "") goes to its
  /// restart's record. The steps beaten so far count as done: work after them is done again.
  void round_closed(int64_t round, const std::vector<std::string>& nodes, const std::string& replaced, TimePoint now);

  /// A node's milestones of `round` (the closed round), received at `now`: the goodput ledger and the
  /// high-water step; with `time_phases` (a heartbeat) also the restart's phases. Returns the event to log
  /// when the restart's recovery just completed.
  std::optional<std::string> milestones(int64_t round, const std::string& node_id,
                                        const proto::AttemptMilestones& attempt, TimePoint now, bool time_phases);
  /// The latest restart, once its recovery is complete (heartbeat replies carry it); else nullptr.
  const proto::RestartRecord* recovered() const;

  /// A participant's heartbeat: its ranks' steps, then the arrival probes over `ranks` (every rank of the
  /// round; their arrival figures are refreshed) and the straggler filter for `fresh` (the ranks it sent).
  void progress(std::vector<HostedRank>& ranks, const std::set<int>& fresh, int world_size, double threshold,
                TimePoint now);
  /// The ranks named slow now.
  std::vector<proto::Straggler> stragglers(const std::vector<HostedRank>& ranks, double threshold) const {
    return stragglers_.named(ranks, threshold);
  }
  /// The rank's compute per collective from arrival times (0 while unknown).
  double arrival_compute_s(int rank) const { return arrivals_.compute_s(rank); }
  /// The arrival probe to hand the agents (empty group: none).
  const proto::ArrivalProbe& arrival_probe() const { return arrivals_.probe(); }
  /// The highest step any rank beat when the current round closed (its assignment's `steps_done`).
  int64_t steps_done() const { return steps_done_before_; }

  /// From `now` on, `count` hot spares wait.
  void spares(int count, TimePoint now) { goodput_.spares(count, now); }
  /// The goodput split as of `now` (`workers_done`: the job's workers finished).
  proto::GoodputReport goodput(TimePoint now, bool workers_done) const { return goodput_.report(now, workers_done); }

  /// The restarts (with the latest's recovery so far), their counts by cause and the hangs by kind.
  void fill(proto::RunStatus& status, TimePoint now) const;

 private:
  /// At debug level: what became of the arrival probe this update settled, with each rank's ratio.
  void log_probe_outcome(const proto::ArrivalProbeTally& before) const;
  /// At debug level: the straggler readings this update took, each rank's ratio to the run's reference.
  void log_straggler_readings() const;
  /// The high-water step: any rank's beat or step account.
  void beaten(int64_t step) { steps_beaten_ = std::max(steps_beaten_, step); }

  std::vector<std::pair<proto::RestartRecord, TimePoint>> restarts_;  // the latest kMaxRestartRecords
  std::map<std::string, int64_t> restarts_by_cause_;                  // every restart, by cause wire name
  std::map<std::string, int64_t> hangs_by_kind_;                      // every hang reported, by verdict kind
  std::optional<TimePoint> fault_at_;         // the closed round's first failure (its report's time)
  std::optional<TimePoint> fault_known_at_;   // ... when its report arrived
  std::optional<RecoveryTimeline> recovery_;  // the latest restart's phases, until its first step
  proto::GoodputLedger goodput_;              // the run's wall time split, since its first join
  int64_t steps_beaten_ = -1;                 // the highest step any rank beat so far
  int64_t steps_done_before_ = -1;            // ... when the current round closed
  StragglerFilter stragglers_;                // who is named slow (hysteresis)
  ArrivalTiming arrivals_;                    // stragglers from collective arrival times
};

}  // namespace meshrun::rendezvous

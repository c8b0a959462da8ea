// Straggler detection: which ranks of a run are slower per step than the rest. Pure (no clock, no I/O):
// Membership feeds it the progress the agents sent with their heartbeats.
//
// A rank's measure is, the first that every rank of the run has: the compute_s its worker reports (time
// per step spent computing, not waiting for other ranks); else its compute per collective derived from
// when the ranks entered their collectives (ArrivalTiming: no code in the script); else its step time.
// In lockstep data-parallel training every rank's step time equals the slowest rank's, so only the first
// two can single a straggler out there; step times still work for ranks that do not wait for each other.
// Each measure is already a median over a recent window, so one slow step names nobody.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "proto/rendezvous_messages.hpp"

namespace meshrun::rendezvous {

/// One rank's progress and the host it runs on.
struct HostedRank {
  std::string host;
  proto::RankProgress progress;
};

/// The measure the run's ranks are compared by: the first that every eligible rank has (compute_s from
/// beats, then the arrival figure, else the step time).
proto::StragglerMeasure run_measure(const std::vector<HostedRank>& ranks);

/// The ranks whose measure exceeds `threshold` times the run's median measure (the lower median, so
/// that with two ranks the faster one is the reference). Only ranks in the "train" phase (or without
/// beats) that are not hung and have a measure count; fewer than two such ranks, or threshold <= 0, name
/// nobody.
std::vector<proto::Straggler> find_stragglers(const std::vector<HostedRank>& ranks, double threshold);

/// find_stragglers with hysteresis, so that noise around the threshold does not make the alert flap: a
/// rank is named once kConfirm readings in a row found it over the threshold *and* over at least kSteps of its
/// steps (for arrival times, once a reading does and the last probes found it slow on their own:
/// ArrivalTiming::over_lately), and cleared once kClear readings in a row found it under the exit ratio
/// (halfway between 1 and the threshold), or not counted, over kSteps steps (collectives, for the arrivals
/// measure). A reading is its node's heartbeat once the rank beat another step (fresh figures) for the beat
/// measures; for arrival times, a new
/// counted probe (the figure changes only then: two heartbeats of one probe are one reading). Counting steps as
/// well keeps slow steps (a noisy median per heartbeat) from flapping and fast ones quick to name. One per run,
/// in the daemon.
class StragglerFilter {
 public:
  static constexpr int kConfirm = 2;
  static constexpr int kClear = 3;
  static constexpr int64_t kSteps = 20;

  /// Updates the ranks in `fresh` (the node that just sent its progress) against the whole run's.
  /// `arrival_probes`: how many arrival probes have been counted (ArrivalTiming::counted());
  /// `arrivals_over`: the ranks the last probes found slow (ArrivalTiming::over_lately).
  void update(const std::vector<HostedRank>& ranks, const std::set<int>& fresh, double threshold,
              int64_t arrival_probes = 0, const std::set<int>& arrivals_over = {});
  /// The named ranks, with their current figures.
  std::vector<proto::Straggler> named(const std::vector<HostedRank>& ranks, double threshold) const;

 private:
  struct State {
    int over = 0;  // heartbeats in a row over the threshold
    int under = 0;
    int64_t over_from = 0;  // the rank's step when the streak began
    int64_t under_from = 0;
    bool named = false;
    int64_t probe = -1;      // the arrival probe of the last reading
    int64_t read_step = -1;  // the rank's step at the last reading (the beat measures)
  };
  std::map<int, State> states_;
};

}  // namespace meshrun::rendezvous

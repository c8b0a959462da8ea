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

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

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

/// Under this ratio to the run's reference a rank counts as not slow: halfway between 1 and `threshold`, the
/// hysteresis band of both routes (StragglerFilter, ArrivalTiming::over_lately).
inline double exit_ratio(double threshold) { return 1 + (threshold - 1) / 2; }

/// find_stragglers with hysteresis, so that noise does not name a healthy rank or make the alert flap.
///
/// The beat measures (compute_s, step time): a reading is a heartbeat that brought a new step of the rank (its
/// figures, medians over its last steps, move only then; a rank not counted reads 0). A rank is named once the
/// lower median of its readings over the last kWindowFor and kSteps of its steps (kMinReadings at least) is
/// over the threshold by kMargin: most of them are; it is cleared once the upper median is under the exit
/// ratio (halfway between 1 and the threshold). After a pause (no new step for longer than the window and
/// than three usual intervals: a save, an evaluation) the window starts afresh.
/// One reading proves nothing either way: on two busy shared cores a healthy rank's median over its last 20
/// steps (under a second of work) read 1.42x for a heartbeat or two, while the scheduler served other
/// processes first; and a rank limited to half a core by a CPU quota read 1.0x for two heartbeats in a row,
/// when the quota's off-periods fell outside its compute (docs/progress.md has the figures).
///
/// Arrival times: a reading is a new counted probe (two heartbeats of one probe are one reading); a rank is
/// named once its figure is over the threshold and the last probes found it slow on their own
/// (ArrivalTiming::over_lately, which holds the same rule in probes), and cleared once kClear readings in a
/// row found it under the exit ratio (or not counted) over kSteps collectives. One per run, in the daemon.
class StragglerFilter {
 public:
  static constexpr auto kWindowFor = std::chrono::seconds(5);
  static constexpr size_t kMinReadings = 4;
  static constexpr double kMargin = 0.05;
  static constexpr int kClear = 3;
  static constexpr int64_t kSteps = 20;

  /// Updates the ranks in `fresh` (the node that just sent its progress, at `now`) against the whole run's.
  /// `arrival_probes`: how many arrival probes have been counted (ArrivalTiming::counted());
  /// `arrivals_over`: the ranks the last probes found slow (ArrivalTiming::over_lately).
  void update(const std::vector<HostedRank>& ranks, const std::set<int>& fresh, double threshold, TimePoint now,
              int64_t arrival_probes = 0, const std::set<int>& arrivals_over = {});
  /// The named ranks, with their current figures.
  std::vector<proto::Straggler> named(const std::vector<HostedRank>& ranks, double threshold) const;
  /// The readings the last update took: each rank's measure / the run's reference (for the debug log).
  const std::map<int, double>& last_readings() const { return last_readings_; }

 private:
  struct Reading {
    TimePoint at{};
    double ratio = 0;
    int64_t step = 0;
  };
  struct State {
    std::deque<Reading> recent;  // the beat measures: the window (read_beats)
    int under = 0;               // arrival times: readings in a row under the exit ratio
    int64_t under_from = 0;      // ... the collectives completed when that began
    int64_t last_mark = 0;       // the rank's progress at its last reading
    bool named = false;
    int64_t probe = -1;      // the arrival probe of the last reading
    int64_t read_step = -1;  // the rank's step at the last reading (the beat measures)
  };
  static void read_beats(State& s, const Reading& reading, double threshold);
  static void read_arrivals(State& s, double ratio, int64_t collectives, double threshold, bool over_lately);
  std::map<int, State> states_;
  std::map<int, double> last_readings_;
};

}  // namespace meshrun::rendezvous

// ArrivalTiming: a straggler measure for scripts that report nothing about themselves, from when each rank
// entered its collectives (docs/progress.md, "Stragglers from arrival times"). Pure: the caller passes
// the time; one per run, in the daemon.
//
// The daemon asks every rank, through the heartbeat replies, for the same range of one process group's
// collectives (a probe); each agent answers with its ranks' mean entry time over the range, moved onto the
// daemon's clock with offsets it measured, and the time the range took. In lockstep every rank waits in
// each collective for the last one to enter, so a rank's total lateness over the range (the sum of its
// entry times minus the earliest rank's) is the compute the others did not have to do: a rank computes
// the range's span minus what it waited, span - (max lateness - its lateness). That figure per collective,
// a mean over the last kWindow probes, is the rank's measure.
//
// One probe is noisy both ways. The figure also holds what a rank spends between the collective's end and
// its next compute, which is not its own slowness: on busy cores a rank woken from a wait can sit runnable
// for milliseconds, and the one that entered last (still hot) tends to again, so a healthy rank can lead by
// 20-35 % for a probe or two before the lead passes to another. And a slow rank's time stopped inside a
// collective (a CPU limit's off-period) counts for every rank, so a rank limited to half a core reads
// anywhere from 1.15x to 2.7x in one probe. So a rank counts as over the threshold (over_lately) when each
// of the last kInARow probes found it over the exit ratio (a lead that passed to another rank is not) and
// their mean is over the threshold by kMargin (the highest healthy pair seen read 1.30x on average against
// a threshold of 1.3: docs/progress.md has the figures).
//
// A probe counts only when every rank answered it with the whole range (the recorder's ring may have
// dropped older entries) and the offsets are precise enough: their uncertainty, counted once per collective,
// must stay under kMaxUncertainty of the span, or the lateness it would fake could name a rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "rendezvous/straggler.hpp"

namespace meshrun::rendezvous {

class ArrivalTiming {
 public:
  // Reading the recorder costs the worker ~20 ms a probe: every 2 s is 1 % of a core at most, and a slow rank's
  // figure moves within two probes (the window's mean of 2).
  static constexpr auto kProbeEvery = std::chrono::seconds(2);
  // An answer takes well under a second, and an agent asks its silent ranks again every second; a probe
  // still open after this is given up for a newer one (a rank that restarted, or a hook that cannot answer).
  static constexpr auto kGiveUpAfter = std::chrono::seconds(8);
  static constexpr int64_t kMaxRange = 512;  // the recorder keeps 2000 entries over every group
  static constexpr int64_t kMinRange = 4;
  static constexpr size_t kWindow = 2;
  static constexpr size_t kInARow = 2;
  static constexpr double kMargin = 0.05;
  static constexpr double kMaxUncertainty = 0.1;

  /// What was asked of the ranks and is not answered yet (empty group: nothing).
  const proto::ArrivalProbe& probe() const { return probe_; }
  /// Reads the answers in `ranks` (every rank of the run): evaluates the probe once all `world_size` ranks
  /// answered it, and opens the next one when due and `wanted` (an answer costs each rank a read of its
  /// recorder: none while nothing would use the figure).
  void update(const std::vector<HostedRank>& ranks, int world_size, TimePoint now, bool wanted = true);
  /// The rank's compute per collective (seconds), a mean over the window; 0 while unknown.
  double compute_s(int rank) const;
  /// A new round: ranks may move to other hosts and their recorders start over. Forgets every figure and
  /// the open probe (counted as abandoned); the tally goes on, since it is the run's.
  void start_over();
  /// What became of the run's probes so far.
  const proto::ArrivalProbeTally& tally() const { return tally_; }
  /// Probes counted so far: a rank's figure is a new reading only when this moved.
  int64_t counted() const { return tally_.counted; }
  /// The ranks the last kInARow probes found slow: each over the exit ratio (halfway between 1 and
  /// `threshold`) times that probe's reference (the lower median of every rank's figure in it), and on
  /// average over `threshold` + kMargin.
  std::set<int> over_lately(double threshold) const;
  /// Each rank's figure / reference in the last counted probes, oldest first (for the debug log).
  const std::map<int, std::deque<double>>& recent_ratios() const { return ratios_; }

 private:
  void evaluate(const std::vector<const proto::ArrivalBlock*>& blocks, const std::vector<int>& ranks);
  void open_next(const std::vector<HostedRank>& ranks, int world_size, TimePoint now);

  proto::ArrivalProbe probe_;
  TimePoint opened_at_{};
  int64_t next_first_ = 1;  // where the next probe starts in group_ (the ranges tile its history)
  std::string group_;
  std::map<int, std::deque<double>> figures_;
  std::map<int, std::deque<double>> ratios_;  // the last kInARow probes' figure / reference
  proto::ArrivalProbeTally tally_;
};

}  // namespace meshrun::rendezvous

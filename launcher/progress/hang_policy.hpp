// HangPolicy: how long a rank may wait in a collective, or stay silent after it has beaten, before the job
// suspects a hang (--hang-timeout, --hang-floor, --hang-phase-timeout, --hang-busy-timeout; docs/progress.md).
//
//   auto (default)  collectives: armed from the first one, floor + 2 x the median gap between completions
//                   (0 until there are two); beats: armed after kWarmupSteps step intervals, floor + 2 x the
//                   median recent step time
//   SECONDS         exactly that long (beats: from the first one)
//   off             never
// Outside the "train" phase (eval, checkpoint, any other word) the budget is at least the phase timeout.
// A rank that never beats is never judged by silence. A worker stopped by a signal (state T) for longer than
// the floor is hung whether it beats or not.
// A suspicion is not yet a verdict: the ranks the others wait for are judged first (launcher/activity/); a busy
// one, or an idle one that waits on the world outside the job, is late, and the job is left to run (to PyTorch's
// own timeout, as under torchrun) unless --hang-busy-timeout or --hang-outside-timeout bounds how long such a rank
// may keep the others waiting.
#pragma once

#include <cstdint>
#include <optional>

namespace meshrun::launcher {

class RankTracker;
class CollectiveWatch;

struct HangPolicy {
  enum class Mode { kAuto, kOff, kFixed };
  /// Step intervals seen before the automatic budget is armed.
  static constexpr int kWarmupSteps = 3;

  Mode mode = Mode::kAuto;
  double fixed_s = 0;                       // kFixed: the budget
  double floor_s = 60;                      // kAuto: added to 2 x the median step time; also the stopped-worker budget
  double phase_s = 1800;                    // the least budget outside the "train" phase
  std::optional<double> busy_timeout_s;     // --hang-busy-timeout: how long a busy rank may keep others waiting
  std::optional<double> outside_timeout_s;  // --hang-outside-timeout: the same for a rank waiting outside the job

  /// The silence allowed after the rank's last beat; nullopt while it is not judged (off, no beats yet,
  /// or still warming up in auto mode).
  std::optional<double> budget_s(const RankTracker& rank) const;
  /// How long a rank may wait in one collective (meshrun's Python hook reports it; docs/progress.md)
  /// before a hang is suspected; nullopt while not judged (off, or no hook). auto: floor + 2 x the median
  /// gap between completions, from the first collective on (a long first step or compilation is judged busy,
  /// not hung). A beat naming a phase other than train raises it to the phase timeout, as for beats.
  std::optional<double> collective_budget_s(const CollectiveWatch& watch, const RankTracker& rank) const;
  /// How long a stopped worker (state T) may stay stopped; nullopt when off.
  std::optional<double> stopped_budget_s() const;

 private:
  /// Fixed, or (auto) floor + 2 x `cadence_s` once `warmup_seen` reached `warmup`; at least the phase
  /// timeout while the rank's last beat named a phase other than train.
  std::optional<double> budget_for(int64_t warmup_seen, int64_t warmup, std::optional<double> cadence_s,
                                   const RankTracker& rank) const;
};

}  // namespace meshrun::launcher

#include "launcher/progress/hang_policy.hpp"

#include <algorithm>

#include "launcher/progress/collective_watch.hpp"
#include "launcher/progress/rank_tracker.hpp"

namespace meshrun::launcher {

std::optional<double> HangPolicy::budget_for(int64_t warmup_seen, int64_t warmup, std::optional<double> cadence_s,
                                             const RankTracker& rank) const {
  double budget = fixed_s;
  if (mode == Mode::kAuto) {
    if (warmup_seen < warmup) return std::nullopt;
    budget = floor_s + 2 * cadence_s.value_or(0);
  }
  if (rank.has_beaten() && rank.last().phase != proto::kTrainPhase) budget = std::max(budget, phase_s);
  return budget;
}

std::optional<double> HangPolicy::budget_s(const RankTracker& rank) const {
  if (mode == Mode::kOff || !rank.has_beaten()) return std::nullopt;
  return budget_for(rank.intervals(), kWarmupSteps, rank.median_step_s(), rank);
}

std::optional<double> HangPolicy::collective_budget_s(const CollectiveWatch& watch, const RankTracker& rank) const {
  if (mode == Mode::kOff || !watch.hooked()) return std::nullopt;
  return budget_for(watch.completions(), 0, watch.median_gap_s(), rank);
}

std::optional<double> HangPolicy::stopped_budget_s() const {
  if (mode == Mode::kOff) return std::nullopt;
  return mode == Mode::kFixed ? std::min(fixed_s, floor_s) : floor_s;
}

}  // namespace meshrun::launcher

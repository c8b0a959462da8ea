#include "launcher/progress/hang_policy.hpp"

#include <algorithm>

#include "launcher/hang/collective_watch.hpp"
#include "launcher/progress/rank_tracker.hpp"

namespace meshrun::launcher {

std::optional<double> HangPolicy::budget_s(const RankTracker& rank) const {
  if (mode == Mode::kOff || !rank.has_beaten()) return std::nullopt;
  double budget = 0;
  if (mode == Mode::kFixed) {
    budget = fixed_s;
  } else {
    if (rank.intervals() < kWarmupSteps) return std::nullopt;
    budget = floor_s + 2 * rank.median_step_s().value_or(0);
  }
  if (rank.last().phase != proto::kTrainPhase) budget = std::max(budget, phase_s);
  return budget;
}

std::optional<double> HangPolicy::collective_budget_s(const CollectiveWatch& watch, const RankTracker& rank) const {
  if (mode == Mode::kOff || !watch.hooked()) return std::nullopt;
  double budget = 0;
  if (mode == Mode::kFixed) {
    budget = fixed_s;
  } else {
    if (watch.completions() < kWarmupSteps) return std::nullopt;
    budget = floor_s + 2 * watch.median_gap_s().value_or(0);
  }
  if (rank.has_beaten() && rank.last().phase != proto::kTrainPhase) budget = std::max(budget, phase_s);
  return budget;
}

std::optional<double> HangPolicy::stopped_budget_s() const {
  if (mode == Mode::kOff) return std::nullopt;
  return mode == Mode::kFixed ? std::min(fixed_s, floor_s) : floor_s;
}

}  // namespace meshrun::launcher

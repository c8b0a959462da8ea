#include "rendezvous/straggler.hpp"

#include <algorithm>

#include "proto/progress_beat.hpp"

namespace meshrun::rendezvous {
namespace {

using proto::StragglerMeasure;

// A rank in the "train" phase, or one without beats (its only measure comes from its collectives).
bool eligible(const proto::RankProgress& p) { return !p.hung && (p.phase == proto::kTrainPhase || p.phase.empty()); }

double measure(const proto::RankProgress& p, StragglerMeasure m) {
  switch (m) {
    case StragglerMeasure::kCompute: return p.compute_s;
    case StragglerMeasure::kArrivals: return p.arrival_compute_s;
    case StragglerMeasure::kStepTime: return p.step_time_s;
  }
  return 0;
}

bool counts(const proto::RankProgress& p, StragglerMeasure m) { return eligible(p) && measure(p, m) > 0; }

}  // namespace

// One measure for the whole run, the best that every eligible rank has: figures of different kinds (per
// step, per collective) never meet in one median.
StragglerMeasure run_measure(const std::vector<HostedRank>& ranks) {
  for (const auto m : {StragglerMeasure::kCompute, StragglerMeasure::kArrivals}) {
    bool all = false;
    for (const auto& r : ranks) {
      if (!eligible(r.progress)) continue;
      all = measure(r.progress, m) > 0;
      if (!all) break;
    }
    if (all) return m;
  }
  return StragglerMeasure::kStepTime;
}

namespace {

// How far the rank got, in the measure's unit: steps from the beats, or collectives completed.
int64_t progress_mark(const proto::RankProgress& p, StragglerMeasure m) {
  if (m != StragglerMeasure::kArrivals) return p.step;
  int64_t most = 0;
  for (const auto& [group, completed] : p.collectives) most = std::max(most, completed);
  return most;
}

// The run's reference: the lower median of the counted measures (0: fewer than two).
double reference(const std::vector<HostedRank>& ranks, StragglerMeasure m) {
  std::vector<double> measures;
  for (const auto& r : ranks) {
    if (counts(r.progress, m)) measures.push_back(measure(r.progress, m));
  }
  if (measures.size() < 2) return 0;
  std::sort(measures.begin(), measures.end());
  return measures[(measures.size() - 1) / 2];
}

proto::Straggler named_rank(const HostedRank& r, StragglerMeasure m, double median) {
  return proto::Straggler{.rank = r.progress.rank,
                          .host = r.host,
                          .seconds = measure(r.progress, m),
                          .median_seconds = median,
                          .measure = m};
}

}  // namespace

void StragglerFilter::update(const std::vector<HostedRank>& ranks, const std::set<int>& fresh, double threshold,
                             int64_t arrival_probes, const std::set<int>& arrivals_over) {
  const StragglerMeasure m = run_measure(ranks);
  const double median = reference(ranks, m);
  const double exit_ratio = 1 + (threshold - 1) / 2;
  for (const auto& r : ranks) {
    if (fresh.count(r.progress.rank) == 0) continue;
    State& s = states_[r.progress.rank];
    if (m == StragglerMeasure::kArrivals) {  // the figure is the same until another probe counts
      if (arrival_probes == s.probe) continue;
      s.probe = arrival_probes;
    } else {  // the figures are the same until the rank beats another step (an early heartbeat carries answers)
      if (r.progress.step == s.read_step) continue;
      s.read_step = r.progress.step;
    }
    const bool measured = threshold > 0 && median > 0 && counts(r.progress, m);
    const double ratio = measured ? measure(r.progress, m) / median : 0;
    const int64_t step = progress_mark(r.progress, m);
    if (step < s.over_from || step < s.under_from) s = State{};  // steps went back: a restart from a checkpoint
    if (ratio > threshold) {
      if (s.over++ == 0) s.over_from = step;
    } else {
      s.over = 0;
    }
    if (ratio < exit_ratio) {
      if (s.under++ == 0) s.under_from = step;
    } else {
      s.under = 0;
    }
    // An arrival figure is confirmed by the last probes, of many collectives each, that found the rank slow.
    const bool confirmed = m == StragglerMeasure::kArrivals ? arrivals_over.count(r.progress.rank) > 0
                                                            : s.over >= kConfirm && step - s.over_from >= kSteps;
    if (!s.named && s.over > 0 && confirmed) s.named = true;
    if (s.named && s.under >= kClear && step - s.under_from >= kSteps) s.named = false;
  }
}

std::vector<proto::Straggler> StragglerFilter::named(const std::vector<HostedRank>& ranks, double threshold) const {
  const StragglerMeasure m = run_measure(ranks);
  const double median = reference(ranks, m);
  std::vector<proto::Straggler> out;
  if (threshold <= 0 || median <= 0) return out;
  for (const auto& r : ranks) {
    const auto it = states_.find(r.progress.rank);
    if (it == states_.end() || !it->second.named || !counts(r.progress, m)) continue;
    out.push_back(named_rank(r, m, median));
  }
  return out;
}

std::vector<proto::Straggler> find_stragglers(const std::vector<HostedRank>& ranks, double threshold) {
  const StragglerMeasure m = run_measure(ranks);
  const double median = reference(ranks, m);
  if (threshold <= 0 || median <= 0) return {};
  std::vector<proto::Straggler> out;
  for (const auto& r : ranks) {
    if (!counts(r.progress, m) || measure(r.progress, m) <= threshold * median) continue;
    out.push_back(named_rank(r, m, median));
  }
  return out;
}

}  // namespace meshrun::rendezvous

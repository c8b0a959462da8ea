#include "rendezvous/straggler.hpp"

#include <algorithm>

#include "proto/worker/progress_beat.hpp"

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

void StragglerFilter::read_beats(State& s, const Reading& reading, double threshold) {
  if (!s.recent.empty()) {
    // Readings from before a pause (a save, an evaluation: no step for longer than the window and than a few
    // usual intervals) say nothing of the rank now: the window starts afresh.
    const auto gap = reading.at - s.recent.back().at;
    const auto usual = s.recent.size() > 1 ? s.recent.back().at - s.recent.rbegin()[1].at : gap;
    if (gap > kWindowFor && gap > 3 * usual) s.recent.clear();
  }
  s.recent.push_back(reading);
  // The window: the last kMinReadings readings at least, back to the one that spans kWindowFor and kSteps.
  const auto spans = [&reading](const Reading& from) {
    return reading.at - from.at >= kWindowFor && reading.step - from.step >= kSteps;
  };
  while (s.recent.size() > kMinReadings && spans(s.recent[1])) s.recent.pop_front();
  if (s.recent.size() < kMinReadings || !spans(s.recent.front())) return;
  std::vector<double> ratios;
  for (const auto& r : s.recent) ratios.push_back(r.ratio);
  std::sort(ratios.begin(), ratios.end());
  const double lower_median = ratios[(ratios.size() - 1) / 2];
  const double upper_median = ratios[ratios.size() / 2];
  if (lower_median > threshold + kMargin) s.named = true;
  if (upper_median < exit_ratio(threshold)) s.named = false;
}

void StragglerFilter::read_arrivals(State& s, double ratio, int64_t collectives, double threshold, bool over_lately) {
  // The figure is confirmed by the last probes, of many collectives each, that found the rank slow.
  if (ratio > threshold && over_lately) s.named = true;
  if (ratio < exit_ratio(threshold)) {
    if (s.under++ == 0) s.under_from = collectives;
  } else {
    s.under = 0;
  }
  if (s.under >= kClear && collectives - s.under_from >= kSteps) s.named = false;
}

void StragglerFilter::update(const std::vector<HostedRank>& ranks, const std::set<int>& fresh, double threshold,
                             TimePoint now, int64_t arrival_probes, const std::set<int>& arrivals_over) {
  last_readings_.clear();
  if (threshold <= 0) return;  // the alert is off: nothing is read, nobody named
  const StragglerMeasure m = run_measure(ranks);
  const double median = reference(ranks, m);
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
    const bool measured = median > 0 && counts(r.progress, m);
    const double ratio = measured ? measure(r.progress, m) / median : 0;
    last_readings_[r.progress.rank] = ratio;
    const int64_t mark = progress_mark(r.progress, m);
    if (mark < s.last_mark) {  // progress went back: a restart from a checkpoint
      s.recent.clear();
      s.under = 0;
      s.named = false;
    }
    s.last_mark = mark;
    if (m == StragglerMeasure::kArrivals) {
      read_arrivals(s, ratio, mark, threshold, arrivals_over.count(r.progress.rank) > 0);
    } else {
      read_beats(s, Reading{.at = now, .ratio = ratio, .step = mark}, threshold);
    }
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

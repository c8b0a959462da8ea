#include "rendezvous/straggler.hpp"

#include <algorithm>

#include "proto/progress_beat.hpp"

namespace meshrun::rendezvous {
namespace {

double measure(const proto::RankProgress& p) { return p.compute_s > 0 ? p.compute_s : p.step_time_s; }

bool counts(const proto::RankProgress& p) { return !p.hung && p.phase == proto::kTrainPhase && measure(p) > 0; }

// The run's reference: the lower median of the counted measures (0: fewer than two).
double reference(const std::vector<HostedRank>& ranks) {
  std::vector<double> measures;
  for (const auto& r : ranks) {
    if (counts(r.progress)) measures.push_back(measure(r.progress));
  }
  if (measures.size() < 2) return 0;
  std::sort(measures.begin(), measures.end());
  return measures[(measures.size() - 1) / 2];
}

}  // namespace

void StragglerFilter::update(const std::vector<HostedRank>& ranks, const std::set<int>& fresh, double threshold) {
  const double median = reference(ranks);
  const double exit_ratio = 1 + (threshold - 1) / 2;
  for (const auto& r : ranks) {
    if (fresh.count(r.progress.rank) == 0) continue;
    State& s = states_[r.progress.rank];
    const bool measured = threshold > 0 && median > 0 && counts(r.progress);
    const double ratio = measured ? measure(r.progress) / median : 0;
    const int64_t step = r.progress.step;
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
    if (!s.named && s.over >= kConfirm && step - s.over_from >= kSteps) s.named = true;
    if (s.named && s.under >= kClear && step - s.under_from >= kSteps) s.named = false;
  }
}

std::vector<proto::Straggler> StragglerFilter::named(const std::vector<HostedRank>& ranks, double threshold) const {
  const double median = reference(ranks);
  std::vector<proto::Straggler> out;
  if (threshold <= 0 || median <= 0) return out;
  for (const auto& r : ranks) {
    const auto it = states_.find(r.progress.rank);
    if (it == states_.end() || !it->second.named || !counts(r.progress)) continue;
    out.push_back(proto::Straggler{
        .rank = r.progress.rank, .host = r.host, .seconds = measure(r.progress), .median_seconds = median});
  }
  return out;
}

std::vector<proto::Straggler> find_stragglers(const std::vector<HostedRank>& ranks, double threshold) {
  std::vector<double> measures;
  for (const auto& r : ranks) {
    if (counts(r.progress)) measures.push_back(measure(r.progress));
  }
  if (threshold <= 0 || measures.size() < 2) return {};
  std::sort(measures.begin(), measures.end());
  const double median = measures[(measures.size() - 1) / 2];
  std::vector<proto::Straggler> out;
  for (const auto& r : ranks) {
    if (!counts(r.progress) || measure(r.progress) <= threshold * median) continue;
    out.push_back(proto::Straggler{
        .rank = r.progress.rank, .host = r.host, .seconds = measure(r.progress), .median_seconds = median});
  }
  return out;
}

}  // namespace meshrun::rendezvous

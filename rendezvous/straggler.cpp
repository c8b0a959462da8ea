#include "rendezvous/straggler.hpp"

#include <algorithm>

#include "proto/progress_beat.hpp"

namespace meshrun::rendezvous {
namespace {

double measure(const proto::RankProgress& p) { return p.compute_s > 0 ? p.compute_s : p.step_time_s; }

bool counts(const proto::RankProgress& p) { return !p.hung && p.phase == proto::kTrainPhase && measure(p) > 0; }

}  // namespace

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

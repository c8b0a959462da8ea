#include "rendezvous/arrival_timing.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

namespace meshrun::rendezvous {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The group every rank reports that has completed the most collectives on all of them (the one the job
// synchronises on: the default group for DDP and 1-D FSDP), and the last collective all of them completed.
std::optional<std::pair<std::string, int64_t>> common_group(const std::vector<HostedRank>& ranks) {
  std::map<std::string, std::pair<size_t, int64_t>> seen;  // group -> ranks reporting it, least completed
  for (const auto& r : ranks) {
    for (const auto& [group, completed] : r.progress.collectives) {
      auto [it, fresh] = seen.try_emplace(group, 0, std::numeric_limits<int64_t>::max());
      ++it->second.first;
      it->second.second = std::min(it->second.second, completed);
    }
  }
  std::optional<std::pair<std::string, int64_t>> best;
  for (const auto& [group, tally] : seen) {
    if (tally.first != ranks.size()) continue;
    if (!best || tally.second > best->second) best = {group, tally.second};
  }
  return best;
}

}  // namespace

void ArrivalTiming::update(const std::vector<HostedRank>& ranks, int world_size, TimePoint now, bool wanted) {
  if (!probe_.group.empty()) {
    std::vector<const proto::ArrivalBlock*> answers;
    std::vector<int> answered;
    for (const auto& r : ranks) {
      const auto& a = r.progress.arrivals;
      if (a.group != probe_.group || a.first_seq != probe_.first_seq || a.last_seq != probe_.last_seq) continue;
      answers.push_back(&a);
      answered.push_back(r.progress.rank);
    }
    if (world_size > 1 && static_cast<int>(answers.size()) == world_size) {
      evaluate(answers, answered);
      probe_ = {};
    } else if (now - opened_at_ > kGiveUpAfter) {
      probe_ = {};  // a rank restarted or never answers: ask for a newer range
      ++tally_.abandoned;
    }
  }
  if (wanted && probe_.group.empty() && now - opened_at_ >= kProbeEvery) open_next(ranks, world_size, now);
}

void ArrivalTiming::start_over() {
  proto::ArrivalProbeTally tally = tally_;
  if (!probe_.group.empty()) ++tally.abandoned;
  *this = ArrivalTiming{};
  tally_ = tally;
}

void ArrivalTiming::open_next(const std::vector<HostedRank>& ranks, int world_size, TimePoint now) {
  if (world_size < 2 || static_cast<int>(ranks.size()) != world_size) return;
  const auto group = common_group(ranks);
  if (!group) return;
  const auto& [name, last] = *group;
  if (name != group_) {  // start after what ran so far: the first collectives (set-up, warm-up) are not lockstep
    group_ = name;
    next_first_ = last + 1;
    opened_at_ = now;
    return;
  }
  const int64_t first = std::max(next_first_, last - kMaxRange + 1);
  if (last - first + 1 < kMinRange) return;
  probe_ = proto::ArrivalProbe{.group = name, .first_seq = first, .last_seq = last};
  next_first_ = last + 1;
  opened_at_ = now;
}

void ArrivalTiming::evaluate(const std::vector<const proto::ArrivalBlock*>& blocks, const std::vector<int>& ranks) {
  const int64_t expected = probe_.last_seq - probe_.first_seq + 1;
  std::vector<double> spans;
  double earliest = std::numeric_limits<double>::max();
  double uncertainty = 0;
  for (const auto* b : blocks) {
    if (b->count != expected) {  // the ring lost part of the range on some rank
      ++tally_.partial;
      return;
    }
    spans.push_back(b->span_s);
    earliest = std::min(earliest, b->mean_unix_s);
    uncertainty = std::max(uncertainty, b->uncertainty_s);
  }
  const double span = median(spans);
  if (span <= 0) {  // no time passed over the range: nothing to measure against
    ++tally_.imprecise;
    return;
  }
  const auto count = static_cast<double>(expected);
  if (uncertainty * count > kMaxUncertainty * span) {
    ++tally_.imprecise;
    return;
  }
  std::vector<double> lateness;
  for (const auto* b : blocks) lateness.push_back((b->mean_unix_s - earliest) * count);
  const double latest = *std::max_element(lateness.begin(), lateness.end());
  std::vector<double> computes;
  for (size_t i = 0; i < blocks.size(); ++i) {
    // What the rank did not spend waiting for the last one; never below a sliver of the span (noise).
    computes.push_back(std::max(span - (latest - lateness[i]), 0.01 * span));
    auto& window = figures_[ranks[i]];
    window.push_back(computes.back() / count);
    if (window.size() > kWindow) window.pop_front();
  }
  std::vector<double> sorted = computes;
  std::sort(sorted.begin(), sorted.end());
  const double reference = sorted[(sorted.size() - 1) / 2];  // the lower median, as the stragglers' reference
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto& ratios = ratios_[ranks[i]];
    ratios.push_back(computes[i] / reference);
    if (ratios.size() > kInARow) ratios.pop_front();
  }
  ++tally_.counted;
}

std::set<int> ArrivalTiming::over_lately(double threshold) const {
  const double exit_at = exit_ratio(threshold);
  std::set<int> over;
  for (const auto& [rank, ratios] : ratios_) {
    if (ratios.size() < kInARow) continue;
    const bool each = std::all_of(ratios.begin(), ratios.end(), [&](double r) { return r > exit_at; });
    const double mean = std::accumulate(ratios.begin(), ratios.end(), 0.0) / static_cast<double>(ratios.size());
    if (each && mean > threshold + kMargin) over.insert(rank);
  }
  return over;
}

double ArrivalTiming::compute_s(int rank) const {
  const auto it = figures_.find(rank);
  if (it == figures_.end() || it->second.empty()) return 0;
  return std::accumulate(it->second.begin(), it->second.end(), 0.0) / static_cast<double>(it->second.size());
}

}  // namespace meshrun::rendezvous

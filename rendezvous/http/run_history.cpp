#include "rendezvous/http/run_history.hpp"

#include <algorithm>
#include <optional>

namespace meshrun::rendezvous::http {
namespace {

// The run's aggregate now; nullopt when no rank reports progress.
std::optional<HistorySample> aggregate(const proto::RunStatus& run) {
  HistorySample s;
  s.round = run.round;
  int ranks = 0;
  int losses = 0;
  for (const auto& node : run.nodes) {
    for (const auto& r : node.ranks) {
      ++ranks;
      s.step = std::max(s.step, r.step);
      if (r.loss != 0) {
        s.loss += r.loss;
        ++losses;
      }
      s.tokens_per_s += r.tokens_per_s;
    }
  }
  if (ranks == 0) return std::nullopt;
  if (losses > 0) s.loss /= losses;
  return s;
}

}  // namespace

RunHistory::RunHistory(size_t capacity) : capacity_(std::max<size_t>(capacity, 2)) { samples_.reserve(capacity_); }

void RunHistory::record(const proto::RunStatus& run, double now_s) {
  const auto sample = aggregate(run);
  if (!sample) return;
  if (!samples_.empty()) {
    const HistorySample& last = samples_.back().first;
    if (sample->round == last.round && sample->step < last.step + stride_) return;
  }
  samples_.emplace_back(*sample, now_s);
  if (samples_.size() >= capacity_) compact();
}

// Keeps every other sample (the first and the newest always: the curve keeps its ends) and samples half as
// often from now on.
void RunHistory::compact() {
  std::vector<std::pair<HistorySample, double>> kept;
  kept.reserve(capacity_);
  for (size_t i = 0; i < samples_.size(); i += 2) kept.push_back(samples_[i]);
  if (samples_.size() % 2 == 0) kept.push_back(samples_.back());
  samples_ = std::move(kept);
  stride_ *= 2;
}

std::vector<HistorySample> RunHistory::samples(double now_s) const {
  std::vector<HistorySample> out;
  out.reserve(samples_.size());
  for (const auto& [sample, at] : samples_) {
    out.push_back(sample);
    out.back().age_s = now_s - at;
  }
  return out;
}

nlohmann::json history_json(const std::string& run_id, const RunHistory& history, double now_s) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : history.samples(now_s)) {
    samples.push_back(
        {{"round", s.round}, {"step", s.step}, {"loss", s.loss}, {"tokens_per_s", s.tokens_per_s}, {"age_s", s.age_s}});
  }
  return {{"run_id", run_id}, {"stride", history.stride()}, {"capacity", history.capacity()}, {"samples", samples}};
}

}  // namespace meshrun::rendezvous::http

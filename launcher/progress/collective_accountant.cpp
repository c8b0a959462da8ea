#include "launcher/progress/collective_accountant.hpp"

#include <algorithm>
#include <vector>

#include "launcher/progress/stall_rule.hpp"

namespace meshrun::launcher {
namespace {

double seconds(CollectiveAccountant::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::optional<double> CollectiveAccountant::rhythm_s() const {
  if (gaps_s_.empty()) return std::nullopt;
  std::vector<double> sorted(gaps_s_.begin(), gaps_s_.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

void CollectiveAccountant::on_status(const std::map<std::string, int64_t>& completed, Clock::time_point now) {
  if (closed_) return;
  const auto previous = last_report_;
  last_report_ = now;
  std::map<std::string, int64_t> moved;  // completions per group since the last report
  for (const auto& [group, count] : completed) {
    const int64_t before = completed_.count(group) > 0 ? completed_[group] : 0;
    moved[group] = std::max<int64_t>(0, count - before);
    completed_[group] = std::max(before, count);
    if (busiest_.empty() || completed_[group] > completed_[busiest_]) busiest_ = group;
  }
  if (busiest_.empty() || moved[busiest_] == 0) return;
  if (!mark_) {
    if (completed_[busiest_] < 2) return;  // the first collective sets the job up
    // The second completed between the report before and this one: the midpoint, so that the half report
    // the account cannot see is neither lost nor counted twice on average.
    const Clock::duration since =
        previous ? std::min<Clock::duration>(now - *previous, kReportEvery) : Clock::duration{};
    first_ = now - since / 2;
    totals_.productive_s += seconds(now - *first_);
    mark_ = now;
    return;
  }
  const double gap = seconds(now - *mark_);
  const StallSplit split = split_stall(gap, rhythm_s().value_or(0));
  totals_.productive_s += split.work_s;
  totals_.stall_s += split.stall_s;
  totals_.steps += moved[busiest_];
  gaps_s_.push_back(gap);
  if (gaps_s_.size() > kWindow) gaps_s_.pop_front();
  mark_ = now;
}

proto::StepAccount CollectiveAccountant::account(Clock::time_point now) const {
  proto::StepAccount a = totals_;
  a.measure = proto::AccountMeasure::kCollectives;
  if (!mark_) return a;
  a.first_step_age_s = seconds(now - *first_);
  a.counted_age_s = seconds(now - *mark_);
  return a;
}

}  // namespace meshrun::launcher

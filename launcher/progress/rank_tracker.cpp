#include "launcher/progress/rank_tracker.hpp"

#include <algorithm>
#include <vector>

namespace meshrun::launcher {
namespace {

std::optional<double> median(const std::deque<double>& values) {
  if (values.empty()) return std::nullopt;
  std::vector<double> sorted(values.begin(), values.end());
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  return *mid;
}

void push_bounded(std::deque<double>& window, double value) {
  window.push_back(value);
  if (window.size() > RankTracker::kWindow) window.pop_front();
}

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void RankTracker::on_beat(const proto::Beat& beat, Clock::time_point now) {
  if (!last_) {
    step_at_ = now;
  } else if (beat.step > last_->step) {
    // Time per step since the step last moved (a worker may beat several times per step, or skip steps).
    push_bounded(step_s_, seconds(now - step_at_) / static_cast<double>(beat.step - last_->step));
    step_at_ = now;
    ++intervals_;
  }
  if (beat.compute_s) push_bounded(compute_s_, *beat.compute_s);
  last_ = beat;
  last_at_ = now;
}

std::optional<double> RankTracker::median_step_s() const { return median(step_s_); }

std::optional<double> RankTracker::median_compute_s() const { return median(compute_s_); }

proto::RankProgress RankTracker::summary(Clock::time_point now, bool hung) const {
  proto::RankProgress p;
  p.rank = rank_;
  p.hung = hung;
  if (!last_) return p;
  p.step = last_->step;
  p.phase = last_->phase;
  p.step_time_s = median_step_s().value_or(0);
  p.compute_s = median_compute_s().value_or(0);
  p.since_beat_s = seconds(now - last_at_);
  p.loss = last_->loss.value_or(0);
  p.tokens_per_s = last_->tokens_per_s.value_or(0);
  return p;
}

}  // namespace meshrun::launcher

#include "launcher/activity/activity_monitor.hpp"

#include <algorithm>

namespace meshrun::launcher {
namespace {

// Samples kept: the window, and a little more so that one late sample does not shorten it.
constexpr double kKeepS = kActivityWindowS + 3;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ActivityMonitor::ActivityMonitor(size_t ranks, std::string proc_root)
    : proc_root_(std::move(proc_root)), ticks_per_s_(clock_ticks_per_second()), samples_(ranks) {}

bool ActivityMonitor::sample(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (now < next_) return false;
  next_ = now + kSampleEvery;
  for (size_t lr = 0; lr < samples_.size(); ++lr) {
    auto& ring = samples_[lr];
    const pid_t pid = lr < pids.size() ? pids[lr] : 0;
    if (pid <= 0) {
      ring.clear();
      continue;
    }
    ring.push_back(read_process_tree(proc_root_, pid, now));
    while (ring.size() > 2 && seconds(now - ring[1].at) >= kKeepS) ring.pop_front();
  }
  return true;
}

const TreeSample* ActivityMonitor::older_sample(size_t lr, double window_s) const {
  const auto& ring = samples_[lr];
  if (ring.empty()) return nullptr;
  // The oldest sample inside the window: what the rank did before the others began waiting (its start-up, its
  // last step) says nothing about the wait, so the window never reaches back past it. Samples come about a
  // second apart; a little slack keeps one that came a few milliseconds early.
  const double window = std::min(window_s, kActivityWindowS) + 0.05;
  for (const auto& s : ring) {
    if (seconds(ring.back().at - s.at) <= window) return &s;
  }
  return &ring.back();
}

ActivityMonitor::Clock::time_point ActivityMonitor::window_start(size_t lr, double window_s) const {
  const TreeSample* older = older_sample(lr, window_s);
  return older != nullptr ? older->at : Clock::time_point{};
}

Activity ActivityMonitor::activity(size_t lr, const StackMotion& stack, double window_s) const {
  const TreeSample* older = older_sample(lr, window_s);
  if (older == nullptr) {
    Activity a;
    a.why_unknown = "its process was never sampled";
    return a;
  }
  return judge_activity(*older, samples_[lr].back(), stack, ticks_per_s_);
}

}  // namespace meshrun::launcher

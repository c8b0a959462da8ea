#include "launcher/activity/activity_monitor.hpp"

#include <algorithm>
#include <iterator>

namespace meshrun::launcher {
namespace {

// Samples kept: the window, and a little more so that one late sample does not shorten it.
constexpr double kKeepS = kActivityWindowS + 3;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr std::chrono::milliseconds kEarlySlack{50};

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

const TreeSample* ActivityMonitor::older_sample(size_t lr, Clock::time_point waiting_since) const {
  const auto& ring = samples_[lr];
  if (ring.empty()) return nullptr;
  // The oldest sample inside the window, which starts when the others began waiting (a sample from before, the
  // rank's start-up, would read as I/O in the wait) and at most kActivityWindowS before the newest sample. Samples
  // come about a second apart; a little slack keeps one that came a few milliseconds early.
  const auto window_s = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kActivityWindowS));
  const auto start = std::max(waiting_since, ring.back().at - window_s) - kEarlySlack;
  const auto first = std::find_if(ring.begin(), ring.end(), [&](const TreeSample& s) { return s.at >= start; });
  if (first == ring.end()) return &ring.back();
  // A wait too short to judge from its own samples reaches back one sample (a second at most before it): a rank
  // called late early is looked at again later, over the wait alone, before anything is done.
  if (first != ring.begin() && seconds(ring.back().at - first->at) < kActivityMinWindowS) return &*std::prev(first);
  return &*first;
}

ActivityMonitor::Clock::time_point ActivityMonitor::window_start(size_t lr, Clock::time_point waiting_since) const {
  const TreeSample* older = older_sample(lr, waiting_since);
  return older != nullptr ? older->at : Clock::time_point{};
}

Activity ActivityMonitor::activity(size_t lr, const StackMotion& stack, Clock::time_point waiting_since) const {
  const TreeSample* older = older_sample(lr, waiting_since);
  if (older == nullptr) {
    Activity a;
    a.why_unknown = "its process was never sampled";
    return a;
  }
  return judge_activity(*older, samples_[lr].back(), stack, ticks_per_s_);
}

}  // namespace meshrun::launcher

// ActivityMonitor: every local rank's process tree sampled once a second, the last few seconds kept, so
// that when the others wait for a rank its agent can say at once whether it is stuck or busy over the
// last kActivityWindowS (activity_rule.hpp). Reading a tree is a few small /proc files per process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "launcher/activity/activity_rule.hpp"
#include "launcher/activity/proc_tree.hpp"

namespace meshrun::launcher {

class ActivityMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kSampleEvery{1000};

  /// `ranks`: local ranks watched; `proc_root`: "/proc", or recorded files in tests.
  explicit ActivityMonitor(size_t ranks, std::string proc_root = "/proc");

  /// Samples every rank's tree when a sample is due; `pids` by local rank (0: exited). True when sampled.
  bool sample(const std::vector<pid_t>& pids, Clock::time_point now);
  /// Local rank `lr` over its samples of the last kActivityWindowS that were taken since `waiting_since` (when the
  /// others began waiting for it: what the rank did before, its start-up or its last step, says nothing about the
  /// wait), less when it has not been watched that long (the window starts at the oldest sample inside it).
  Activity activity(size_t lr, const StackMotion& stack, Clock::time_point waiting_since = {}) const;
  /// The start of the window activity() judges (the older sample's time), for the stack reads to match.
  Clock::time_point window_start(size_t lr, Clock::time_point waiting_since = {}) const;

 private:
  const TreeSample* older_sample(size_t lr, Clock::time_point waiting_since) const;

  std::string proc_root_;
  long ticks_per_s_;
  std::vector<std::deque<TreeSample>> samples_;
  Clock::time_point next_{};
};

}  // namespace meshrun::launcher

// SchedulerClock: how long ago a thread last ran, from its se.exec_start in /proc/<pid>/task/<tid>/sched. That time
// is on its CPU's run-queue task clock, which leaves out what the kernel does not count as its tasks' (a VM's stolen
// time, interrupts): it lags /proc/uptime by minutes on a busy VM, and one CPU's by a second or more another's.
// "Now" is therefore read on the same CPU's clock: the reading thread, moved there for a moment, is running, so its
// own exec_start is now.
#pragma once

#include <map>
#include <string>

namespace meshrun::launcher {

class SchedulerClock {
 public:
  /// `proc_root`: "/proc" (live), or a recorded tree, whose /proc/uptime stands for every CPU's clock.
  explicit SchedulerClock(std::string proc_root);

  /// Seconds since the task at `task_dir` last ran (-1: not known).
  double idle_seconds(const std::string& task_dir);

 private:
  double now_ms(int cpu);

  std::string root_;
  bool live_;
  std::map<int, double> now_by_cpu_;  // read once per inquiry: a few milliseconds apart at most
};

}  // namespace meshrun::launcher

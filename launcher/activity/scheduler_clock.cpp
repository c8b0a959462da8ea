#include "launcher/activity/scheduler_clock.hpp"

#include <sched.h>

#include <algorithm>
#include <sstream>

#include "launcher/activity/proc_tree.hpp"

namespace meshrun::launcher {
namespace {

// A task's se.exec_start, in ms (-1: not known).
double exec_start_ms(const std::string& task_dir) {
  const std::string sched = read_proc_file(task_dir + "/sched");
  const auto at = sched.find("se.exec_start");
  if (at == std::string::npos) return -1;
  const auto colon = sched.find(':', at);
  if (colon == std::string::npos) return -1;
  std::istringstream in(sched.substr(colon + 1, 40));
  double ms = -1;
  in >> ms;
  return in ? ms : -1;
}

// The CPU the task last ran on: its stat's 39th field (-1: not known).
int last_cpu(const std::string& task_dir) {
  const std::string stat = read_proc_file(task_dir + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 39; ++i) {  // fields 3.. follow the command's name
    if (!(rest >> field)) return -1;
  }
  try {
    return std::stoi(field);
  } catch (const std::exception&) {
    return -1;
  }
}

// Restores the calling thread's CPU mask when it leaves scope.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) {
    if (::sched_getaffinity(0, sizeof(saved_), &saved_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pinned_ = ::sched_setaffinity(0, sizeof(one), &one) == 0;  // fails for a CPU outside this process's cpuset
  }
  ~PinnedTo() {
    if (pinned_) ::sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;
  bool pinned() const { return pinned_; }

 private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

}  // namespace

SchedulerClock::SchedulerClock(std::string proc_root) : root_(std::move(proc_root)), live_(root_ == "/proc") {}

double SchedulerClock::now_ms(int cpu) {
  if (const auto it = now_by_cpu_.find(cpu); it != now_by_cpu_.end()) return it->second;
  double now = -1;
  if (!live_) {
    std::istringstream in(read_proc_file(root_ + "/uptime"));
    double up = -1;
    in >> up;
    if (in && up >= 0) now = up * 1000;
  } else if (cpu >= 0 && cpu < CPU_SETSIZE) {
    const PinnedTo pin(cpu);  // the move itself schedules this thread there: its exec_start is now
    if (pin.pinned()) now = exec_start_ms("/proc/thread-self");
  }
  now_by_cpu_[cpu] = now;
  return now;
}

double SchedulerClock::idle_seconds(const std::string& task_dir) {
  const double ran_ms = exec_start_ms(task_dir);
  if (ran_ms < 0) return -1;
  const double now = now_ms(live_ ? last_cpu(task_dir) : 0);
  if (now < 0) return -1;
  return std::max(0.0, (now - ran_ms) / 1000.0);
}

}  // namespace meshrun::launcher

// Stuck or busy: what a rank that others wait for is doing, judged from two samples of its process tree
// (proc_tree.hpp) some seconds apart and from whether its Python stack moved between them (docs/progress.md,
// "Stuck or busy"). Pure.
//
//   stopped  its worker is stopped by a signal (state T or t)
//   busy     the tree computes (CPU), reads or writes (bytes through read/write calls), its main thread keeps
//            waking up (a socket stream, a tight polling loop), or its Python stack moved: a *late* rank
//   idle     none of these above the noise: a rank blocked on a lock, an event, a silent socket
//   unknown  not judged: too short a window, or the worker is gone
// A rank that spins forever is busy by this rule; --hang-busy-timeout bounds how long one may keep the
// others waiting (docs/progress.md).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "launcher/activity/proc_tree.hpp"

namespace meshrun::launcher {

enum class Liveness { kUnknown, kStopped, kIdle, kBusy };

std::string_view to_string(Liveness value);

/// Above these, a tree is doing something. Below, it is noise: meshrun's hook thread polls twice a second
/// (well under 1 % of a core), a logger writes a line now and then, a loop that waits for something by
/// sleeping 50 ms at a time wakes 20 times a second; a socket stream (recv is not counted as I/O) wakes its
/// main thread far more often.
struct ActivityNoise {
  static constexpr double kCpuCores = 0.05;
  static constexpr double kBytesPerS = 64 * 1024;
  static constexpr double kWakeupsPerS = 50;
};

/// The window a judgment wants, and the least it accepts.
inline constexpr double kActivityWindowS = 10;
inline constexpr double kActivityMinWindowS = 2;

/// Whether the rank's Python stack moved over the window, read from meshrun's hook (unknown for workers
/// without one, or one whose process holds Python's lock).
struct StackMotion {
  bool known = false;
  bool moved = false;
  std::string where;  // the newest read's innermost frame of the user's code: "save at train.py:14"
};

struct Activity {
  Liveness liveness = Liveness::kUnknown;
  double window_s = 0;
  int processes = 0;  // in the tree, the worker included
  char state = '\0';  // the worker's own state letter
  double cpu_cores = 0;
  double read_bytes_per_s = 0;
  double write_bytes_per_s = 0;
  double wakeups_per_s = 0;
  bool stack_known = false;
  bool stack_moved = false;
  std::string where;
  std::string why_unknown;  // kUnknown: why not judged
};

/// The judgment over [older, newer]. `ticks_per_s`: the kernel's clock ticks (CPU times are in ticks).
Activity judge_activity(const TreeSample& older, const TreeSample& newer, const StackMotion& stack, long ticks_per_s);

/// For people: "busy (0.97 CPU, writing 19.8 MB/s)", "idle for 10 s (0.00 CPU, no I/O, its Python stack
/// unchanged)", "stopped by a signal (state T)"; with `where` appended as " in save at train.py:14".
std::string describe(const Activity& activity);

void to_json(nlohmann::json& j, const Activity& activity);
void from_json(const nlohmann::json& j, Activity& activity);

}  // namespace meshrun::launcher

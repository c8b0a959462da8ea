// What a worker's whole process tree did, read from /proc: the worker and every descendant (DataLoader
// workers, compile pools, a shell's children), found through /proc/<pid>/task/<tid>/children (or, on a
// kernel without those files, by scanning every process's parent). Each process gives its CPU time (its
// own and its reaped children's, so a tree's total does not drop when a child is reaped), the bytes it
// passed to read and write calls (files and pipes; socket calls are not counted by the kernel) and, for
// its main thread, how often it woke up from a wait. The proc root is a parameter: tests read recorded files.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace meshrun::launcher {

/// One process of a tree at one moment.
struct ProcessSample {
  pid_t pid = 0;
  char state = '\0';         // /proc/<pid>/stat's state letter: R, S, D, T, t, Z...
  uint64_t cpu_ticks = 0;    // utime + stime + cutime + cstime, in clock ticks
  uint64_t read_bytes = 0;   // rchar: bytes read by read-like calls
  uint64_t write_bytes = 0;  // wchar: bytes written by write-like calls
  uint64_t wakeups = 0;      // the main thread's voluntary context switches
  bool io_known = false;     // /proc/<pid>/io was readable
};

/// A worker's tree at one moment; processes[0] is the worker itself (empty: it is gone).
struct TreeSample {
  std::chrono::steady_clock::time_point at{};
  std::vector<ProcessSample> processes;

  bool empty() const { return processes.empty(); }
  /// The worker's own state letter ('\0' when it is gone).
  char leader_state() const { return processes.empty() ? '\0' : processes.front().state; }
};

/// Reads `leader` and its descendants under `proc_root` ("/proc" in production).
TreeSample read_process_tree(const std::string& proc_root, pid_t leader, std::chrono::steady_clock::time_point at);

/// One process's sample, or a sample with pid 0 when it is gone (exposed for tests).
ProcessSample read_process(const std::string& proc_root, pid_t pid);

/// A small file's whole text (a /proc file), or "" when it cannot be read (the process ended meanwhile).
std::string read_proc_file(const std::string& path);

/// The kernel's clock ticks per second (sysconf(_SC_CLK_TCK)).
long clock_ticks_per_second();

}  // namespace meshrun::launcher

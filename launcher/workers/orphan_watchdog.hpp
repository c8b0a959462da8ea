// OrphanWatchdog: takes down a run's leftover processes when meshrun itself dies, even by SIGKILL
// (PR_SET_PDEATHSIG reaches only each worker, not what the worker spawned). meshrun starts it as
// `meshrun __orphan-watchdog FD TOKEN` in a session of its own, holding the read end of a pipe whose
// write end only meshrun has: when meshrun exits for any reason the pipe reports end-of-file, and the
// watchdog kills every process that carries the run's job token (job_token.hpp), then exits.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

inline constexpr const char* kOrphanWatchdogCommand = "__orphan-watchdog";

class OrphanWatchdog {
 public:
  /// Starts the watchdog for `token` (this executable, /proc/self/exe). Throws Error when it cannot.
  explicit OrphanWatchdog(const std::string& token);
  /// Closes the pipe (the watchdog sweeps, normally finding nothing, and exits) and reaps it.
  ~OrphanWatchdog();
  OrphanWatchdog(const OrphanWatchdog&) = delete;
  OrphanWatchdog& operator=(const OrphanWatchdog&) = delete;

 private:
  pid_t pid_ = -1;
  UniqueFd write_end_;
};

/// The watchdog process: waits for end-of-file on `fd`, then kills the token's processes. Returns 0.
int run_orphan_watchdog(int fd, const std::string& token);

}  // namespace meshrun::launcher

// WorkerProcess: one worker as a child process that owns its own process group and dies with the launcher.
//
// Life cycle:  spawn() --exec ok--> running --exit observed (poll)--> exited (zombie kept) --reap()--> reaped
// The exited leader is kept as a zombie until reap() so its process-group id cannot be reused while we may
// still signal the group (stragglers a worker forked are killed by reap()).
#pragma once

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "launcher/failure/exit_status.hpp"

namespace meshrun::launcher {

/// A worker could not be started (fork failed, or exec failed: not found, not executable).
class SpawnError : public Error {
 public:
  SpawnError(const std::string& message, int err) : Error(message), errno_(err) {}
  int error_number() const { return errno_; }

 private:
  int errno_;
};

/// What to start and where its standard streams go. fds are duplicated into the child as 0/1/2.
struct SpawnSpec {
  std::string executable;         // absolute path, or a path with a '/'; no PATH search here
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "KEY=VALUE"
  int stdin_fd = -1;              // -1: /dev/null
  int stdout_fd = 1;
  int stderr_fd = 2;
  sigset_t child_sigmask{};  // the mask the worker starts with (the launcher's original one)
  int control_fd = -1;       // >= 0: also given to the child, as fd 3 (a standby's socket to its agent)
};

class WorkerProcess {
 public:
  /// Forks and execs. Returns once the child exists; exec success is confirmed by confirm_exec().
  static WorkerProcess spawn(const SpawnSpec& spec);

  WorkerProcess(WorkerProcess&& other) noexcept;
  WorkerProcess& operator=(WorkerProcess&&) = delete;
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  /// Kills the whole group (SIGKILL) and reaps, unless already reaped.
  ~WorkerProcess();

  /// Waits until the child has exec'd; throws SpawnError (after reaping it) when exec failed.
  void confirm_exec();

  pid_t pid() const { return pid_; }
  /// True until an exit has been observed.
  bool running() const { return !status_.has_value(); }
  /// Checks without blocking whether the process exited; true when it has (now or before).
  bool poll();
  /// Set once poll() saw the exit.
  const std::optional<ExitStatus>& status() const { return status_; }
  /// Sends `sig` to the worker's process group (no-op once reaped).
  void signal_group(int sig);
  /// SIGKILLs what is left of the group and reaps the leader (blocking only if it is still running).
  void reap();

 private:
  WorkerProcess(pid_t pid, UniqueFd exec_check) : pid_(pid), exec_check_(std::move(exec_check)) {}

  pid_t pid_ = -1;
  UniqueFd exec_check_;  // read end of a CLOEXEC pipe: EOF = exec succeeded, 4 bytes = errno of a failed exec
  std::optional<ExitStatus> status_;
  bool reaped_ = false;
};

}  // namespace meshrun::launcher

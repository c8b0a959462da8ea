// WorkerGroup: this node's workers for one attempt: spawned together, their output pumped, their exits
// observed, stopped together.
//
// Worker states (as torch.distributed.elastic names them):
//   running --exit 0--> succeeded      running --exit != 0 / signal--> failed
//   any running --stop()--> SIGTERM to every group, SIGKILL after the grace period, all reaped
// The group's result is all-or-nothing: it succeeded only when every worker exited 0.
#pragma once

#include <poll.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/signal_set.hpp"
#include "launcher/failure/failure_summary.hpp"
#include "launcher/workers/output_pump.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_env.hpp"
#include "launcher/workers/worker_process.hpp"
#include "launcher/workers/worker_settings.hpp"

namespace meshrun::launcher {

class StandbyPool;

/// Everything needed to start one attempt's workers.
struct GroupSpec {
  WorkerCommand command;
  AttemptSettings settings;
  std::vector<std::string> base_env;
  int attempt = 0;
  std::string attempt_dir;  // <root>/attempt_<n>; per-rank folders go below it
  bool log_files = false;   // --log-dir given: every stream is also written to a file
  StreamMask redirects;
  StreamMask tee;
  std::optional<std::set<int>> local_ranks_filter;
  std::string prefix_template;  // empty: "[rank${rank}]:"
  std::string hostname;
  sigset_t child_sigmask{};
  std::vector<std::string> progress_sockets;  // MESHRUN_PROGRESS per local rank (ProgressMonitor::socket_paths)
  // --duplicate-stdout-filters / --duplicate-stderr-filters: matching lines of every rank also go to
  // <attempt_dir>/filtered_stdout.log / filtered_stderr.log (empty: no file).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  StandbyPool* standbys = nullptr;  // warm interpreters to start the workers from (nullptr: none)
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  std::string dir;
  std::string stdout_log;  // empty when not written
  std::string stderr_log;
  std::string error_file;
  std::optional<WorkerProcess> process;
  std::unique_ptr<OutputPump> out;
  std::unique_ptr<OutputPump> err;
  std::chrono::system_clock::time_point exit_time;
  bool from_standby = false;  // a standby became this worker (launcher/workers/)
};

class WorkerGroup {
 public:
  /// Creates the per-rank folders and starts every worker; throws SpawnError (nothing left running).
  explicit WorkerGroup(const GroupSpec& spec);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// Polls `signals`, the workers' pipes and `wake_fds` (returning early when one is readable; the caller
  /// reads it) for up to `timeout`, pumps output and observes exits. Returns the signals received
  /// (SIGCHLD filtered out).
  std::vector<int> wait(SignalSet& signals, std::chrono::milliseconds timeout, const std::vector<int>& wake_fds = {});
  /// The running workers' pids by local rank (0 once a worker exited).
  std::vector<pid_t> running_pids() const;
  /// Index of the first worker observed failing, if any.
  std::optional<size_t> first_failure() const { return first_failure_; }
  bool all_exited() const;
  /// Sends `sig` to every running worker's process group.
  void signal_all(int sig);
  /// Sends `first_signal` (0: none, the caller already did) and SIGCONT to the running workers, gives them up to
  /// `grace` to exit (output still pumped), then SIGKILL; everything reaped on return. Signals received
  /// meanwhile are returned (a second SIGINT/SIGTERM cuts the grace period short).
  std::vector<int> stop(SignalSet& signals, std::chrono::milliseconds grace, int first_signal = SIGTERM);
  /// Reads what worker `index`'s pipes hold now (an exited worker's last words), without waiting.
  void drain_output(size_t index);
  /// The failure summary input for worker `index`.
  FailureInfo failure_info(size_t index) const;

  const std::vector<Worker>& workers() const { return workers_; }
  int attempt() const { return attempt_; }
  /// <root>/attempt_<n>: the per-rank folders are below it.
  const std::string& attempt_dir() const { return attempt_dir_; }

 private:
  void observe_exits();
  void finish();

  std::vector<Worker> workers_;
  std::optional<size_t> first_failure_;
  int attempt_ = 0;
  std::string attempt_dir_;
  std::string role_;
  std::string hostname_;
  std::string job_token_;            // what the workers' leftovers carry (job_token.hpp)
  StandbyPool* standbys_ = nullptr;  // their pids carry the token too, and are spared
  bool finished_ = false;
};

}  // namespace meshrun::launcher

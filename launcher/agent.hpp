// Agent: the launcher's main loop for one node.
//
//   rendezvous (join, wait for ranks) -> start the worker group -> supervise:
//     every worker exited 0                  -> leave ok, (host: wait for the other nodes) -> exit 0
//     a worker failed                        -> stop the rest, print the summary; restarts left?
//                                                yes: report the failure, re-rendezvous, next attempt
//                                                no:  leave, exit with that worker's code
//     others wait for a rank (progress/)    -> every node posts its ranks' records (hang/HangExchange) and
//                                                judges them alike: a stuck culprit is hung (its agent reports
//                                                it, every node prints the grouped stacks, then as a failure
//                                                with the cause "hung"); a busy one is late (one line, judged
//                                                again later; hung only past --hang-busy-timeout)
//     heartbeat says "restart" (other node)  -> stop the group; restarts left? re-rendezvous : exit 1
//     a spare (round full)                   -> wait, heartbeating, until a round takes it or the run ends
//                                                (ended well: exit 0)
//     heartbeat says "fail" (run failed)      -> stop the group, exit 1 with the daemon's reason
//     keep_alive_max_attempt heartbeats fail  -> stop the group, exit 1 naming the endpoint (daemon gone)
//     SIGINT/SIGTERM/SIGHUP/SIGQUIT          -> forward, grace period, SIGKILL, leave, exit 128+signal
//     SIGUSR1/SIGUSR2                        -> forward only
// Workers' progress beats (MESHRUN_PROGRESS) are read as they arrive and summarised in each heartbeat;
// the daemon's reply names stragglers, which every agent prints once when they change.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/signal_set.hpp"
#include "launcher/attempt.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/failure/root_cause_reporter.hpp"
#include "launcher/run_reports.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_env.hpp"
#include "proto/agents/hang_request.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::proto {
struct Assignment;
struct Straggler;
}  // namespace meshrun::proto

namespace meshrun::launcher {

class RendezvousBackend;
struct HangVerdict;
class ProgressMonitor;
class StandbyPool;
struct GroupSpec;
struct MemoryAttempt;
class MemoryKeeper;

class Agent {
 public:
  Agent(const LaunchOptions& options, WorkerCommand command, SignalSet& signals);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job to the end; returns the process exit code. Throws on rendezvous errors.
  int run();

 private:
  void make_log_root(const std::string& run_id);
  void make_progress_root();
  /// The standby workers, unless --no-standby or the workers are not Python (said once where restarts may come).
  std::unique_ptr<StandbyPool> make_standbys() const;
  /// Starts the standbys a restart would take, once this attempt no longer needs the cores to start (its first
  /// step, or kStandbyDelay), and only while a restart may still come.
  void keep_standbys(const Attempt& attempt);
  /// The environment a standby starts with: its worker's, for the attempt settings known now.
  std::vector<std::string> standby_env(int local_rank) const;
  GroupSpec group_spec(const proto::Assignment& assignment, const RendezvousBackend& rdzv,
                       const ProgressMonitor& progress) const;
  /// What the memory keeper needs of a round: its store, this node's place and address.
  MemoryAttempt memory_attempt(const proto::Assignment& assignment) const;
  /// Leaves the run with the last attempt's step account; prints the run's goodput line the daemon answers with.
  void leave(RendezvousBackend& rdzv, const std::string& reason, bool ok);
  /// Starts round `assignment`'s workers and runs the attempt to its end; throws EntrypointError (having left
  /// the run) when they cannot start.
  AttemptResult run_attempt(const proto::Assignment& assignment, RendezvousBackend& rdzv,
                            const AttemptServices& services);
  /// How each attempt is supervised, from the options.
  SupervisionSettings supervision_settings() const;
  /// How `result` ended round `round`, for naming its root cause.
  static RootCauseReporter::Ending ending_of(int64_t round, const AttemptResult& result);
  /// Whether --max-restarts allows another restart of a failure.
  bool restarts_left() const;
  /// Whether `conclude` will restart after `result` (a failure with --max-restarts left).
  bool will_restart(const AttemptResult& result) const;
  /// Whether this attempt's workers may skip Python's teardown when they fail: a failure would be restarted,
  /// and the hook that does it is installed (docs/multi-node.md#quick-exit).
  bool quick_exit() const;
  /// The exit code when the attempt ends the run; nullopt when the agent goes to the next round.
  std::optional<int> conclude(const AttemptResult& result, RendezvousBackend& rdzv);

  const LaunchOptions& options_;
  WorkerCommand command_;
  SignalSet& signals_;
  std::chrono::milliseconds grace_;        // --shutdown-timeout: TERM to KILL when stopping workers
  std::chrono::milliseconds fault_grace_;  // --fault-stop-timeout: the same when a fault ends the attempt
  std::vector<std::string> base_env_;
  std::string log_root_;  // <log-dir>/<run id>, or a temporary folder
  bool temporary_root_ = false;
  std::string job_token_;                    // every worker's MESHRUN_JOB_TOKEN (launcher/workers/job_token.hpp)
  std::unique_ptr<MemoryKeeper> memory_;     // the copies in memory: they outlive each attempt, never the agent
  std::string memory_socket_;                // the HandoverServer's socket (MESHRUN_MEMORY)
  std::string progress_root_;                // the workers' progress sockets (short path: a socket name is <108 bytes)
  std::string hook_dir_;                     // meshrun's Python hook (empty: --hang-timeout off)
  std::unique_ptr<StandbyPool> standbys_;    // nullptr when off
  std::optional<AttemptSettings> settings_;  // the current attempt's (standby_env)
  std::chrono::steady_clock::time_point next_standby_check_{};
  RunReports reports_;                     // stragglers, recoveries and late ranks, said once across attempts
  proto::AttemptMilestones last_attempt_;  // how far the last attempt got, its step account closed (for leave)
  std::chrono::steady_clock::time_point last_attempt_at_{};  // ... as ages at this moment
  // Restarts charged to --max-restarts (failures, lost nodes); admitting a late node (scale-up) is free,
  // as in torchrun.
  int restarts_used_ = 0;
  RootCauseReporter root_cause_;  // the job's first failure across nodes, named once due
};

}  // namespace meshrun::launcher

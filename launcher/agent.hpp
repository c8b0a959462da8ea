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
#include "launcher/cli/options.hpp"
#include "launcher/failure/root_cause_reporter.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_env.hpp"
#include "proto/hang_request.hpp"
#include "proto/rendezvous_messages.hpp"

namespace meshrun::proto {
struct Assignment;
struct Straggler;
}  // namespace meshrun::proto

namespace meshrun::launcher {

struct Attempt;
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
  // How one attempt ended.
  struct AttemptResult {
    enum class Kind {
      kSucceeded,
      kWorkerFailed,
      kWorkerHung,      // a worker stopped making progress (or was stopped): handled as a failure
      kRemoteRestart,   // another node failed or left: the daemon opened a new round
      kScaleUp,         // a waiting node is admitted (free: not counted against --max-restarts)
      kRunFailed,       // the daemon declared the whole run failed
      kRendezvousLost,  // the daemon stopped answering
      kSignaled,
    };
    Kind kind = Kind::kSucceeded;
    int exit_code = 0;                                  // kWorkerFailed: the worker's code; kSignaled: 128+signal
    std::string reason;                                 // for the daemon and the user
    std::chrono::steady_clock::time_point failed_at{};  // kWorkerFailed/kWorkerHung: when it was found
    int expected_report_rank = -1;  // kWorkerHung: the culprit whose report the root cause waits for
  };
  // When the next heartbeat is due, and how many in a row failed.
  struct HeartbeatSchedule {
    std::chrono::steady_clock::time_point next;
    int failures = 0;
  };

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
  /// Supervises one attempt's workers until it ends.
  AttemptResult supervise(Attempt& attempt);
  std::optional<AttemptResult> on_signals(Attempt& attempt, const std::vector<int>& signals);
  std::optional<AttemptResult> on_worker_exits(Attempt& attempt);
  std::optional<AttemptResult> on_hang(Attempt& attempt);
  /// Every node's records judged together (hang/hang_inquiry.hpp), the verdict printed and reported, the
  /// workers stopped; nothing when the verdict is "late" (the ranks waited for are busy: the job goes on).
  /// `suspicion` is the first request (this node's or another's).
  std::optional<AttemptResult> conclude_hang(Attempt& attempt, const proto::HangRequest& suspicion,
                                             bool requested_here);
  /// A late verdict: said, marked on this node's late ranks, judged again later.
  void on_late(Attempt& attempt, const HangVerdict& verdict);
  /// Stops the workers (TERM, `grace`, KILL) with heartbeats going on meanwhile.
  void stop_workers(Attempt& attempt, std::chrono::milliseconds grace, int first_signal = 15);
  /// One heartbeat: its reply's restart, failure, stragglers and arrival probe. `early`: sent beside the
  /// schedule with the ranks' arrival answers; its failure does not count towards losing the rendezvous.
  std::optional<AttemptResult> on_heartbeat(Attempt& attempt, HeartbeatSchedule& schedule, bool early = false);
  /// Leaves the run with the last attempt's step account; prints the run's goodput line the daemon answers with.
  void leave(RendezvousBackend& rdzv, const std::string& reason, bool ok);
  /// Prints a restart's recovery ledger once the daemon has it complete (once per restart).
  void report_recovery(const proto::HeartbeatReply& beat);
  /// Prints the daemon's stragglers when the set changed since the last heartbeat.
  void report_stragglers(const std::vector<proto::Straggler>& stragglers);
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
  std::vector<int> straggler_ranks_;  // as last reported by the daemon
  struct LateSaid {
    std::string subject;  // the late ranks and the collective (a new subject is said at once)
    std::chrono::steady_clock::time_point at{};
  };
  LateSaid late_said_;                     // the last late line printed
  int64_t recovery_printed_ = 0;           // the last round whose recovery ledger was printed
  proto::AttemptMilestones last_attempt_;  // how far the last attempt got, its step account closed (for leave)
  std::chrono::steady_clock::time_point last_attempt_at_{};  // ... as ages at this moment
  // Restarts charged to --max-restarts (failures, lost nodes); admitting a late node (scale-up) is free,
  // as in torchrun.
  int restarts_used_ = 0;
  RootCauseReporter root_cause_;  // the job's first failure across nodes, named once due
};

}  // namespace meshrun::launcher

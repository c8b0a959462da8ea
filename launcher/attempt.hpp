// Attempt: one round's workers and what watches them, from their spawn to the attempt's end. Agent::run() builds
// one per round and calls run(), which supervises the workers until the attempt ends and says how (AttemptResult):
// they all exited 0, one failed, a hang was judged, the rendezvous asked for a restart or declared the run failed,
// the rendezvous was lost, a signal came. It owns, in the order they start:
//   progress   the workers' beats and collective reports (progress/)
//   group      the workers themselves (workers/), spawned from the spec the agent gives for `progress`
//   hangs      the hang watch: suspicion, the inquiry with the other nodes, late or hung (hang/)
//   arrivals   the daemon's arrival probes relayed to the workers' hooks (progress/)
//   clock      the attempt's milestones: spawned, initialized, loaded, first step (progress/)
// What outlives an attempt (the signals, the copies in memory, the run's reports, the standbys and a pending root
// cause) the agent lends it in AttemptServices.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/signal_set.hpp"
#include "launcher/hang/hang_watch.hpp"
#include "launcher/progress/arrival_relay.hpp"
#include "launcher/progress/attempt_clock.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "launcher/rdzv/heartbeat_keeper.hpp"
#include "launcher/workers/worker_group.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher {

class RendezvousBackend;
class MemoryKeeper;
class RunReports;
class Attempt;

/// How one attempt ended.
struct AttemptResult {
  enum class Kind {
    kSucceeded,
    kWorkerFailed,
    kWorkerHung,        // a worker stopped making progress (or was stopped): handled as a failure
    kRemoteRestart,     // another node failed or left: the daemon opened a new round
    kScaleUp,           // a waiting node is admitted (free: not counted against --max-restarts)
    kSlowNodeReplaced,  // a slow node made way for a spare (--replace-slow-nodes; free, as kScaleUp)
    kRunFailed,         // the daemon declared the whole run failed
    kRendezvousLost,    // the daemon stopped answering
    kSignaled,
  };
  Kind kind = Kind::kSucceeded;
  int exit_code = 0;                                  // kWorkerFailed: the worker's code; kSignaled: 128+signal
  std::string reason;                                 // for the daemon and the user
  std::chrono::steady_clock::time_point failed_at{};  // kWorkerFailed/kWorkerHung: when it was found
  int expected_report_rank = -1;                      // kWorkerHung: the culprit whose report the root cause waits for
};

/// How an attempt is supervised (the agent reads them off its options).
struct SupervisionSettings {
  std::chrono::milliseconds monitor{};      // --monitor-interval: the longest wait between looks
  std::chrono::milliseconds keep_alive{};   // between heartbeats
  int keep_alive_max_attempt = 3;           // heartbeats failed in a row before the rendezvous is lost
  std::chrono::milliseconds grace{};        // --shutdown-timeout: TERM to KILL when stopping workers
  std::chrono::milliseconds fault_grace{};  // --fault-stop-timeout: the same when a fault ends the attempt
  bool etcd = false;                        // the rendezvous is etcd (the words of a lost rendezvous)
  std::string executable;                   // the entrypoint, for the hang verdict's file
};

/// What the agent lends each attempt: it outlives them.
struct AttemptServices {
  SignalSet& signals;
  SupervisionSettings settings;
  const MemoryKeeper& memory;  // where the workers restored from, for the milestones
  RunReports& reports;         // stragglers, recovery, late ranks: said once across attempts
  /// The agent's own chores at each wake-up of the attempt's loop (its standbys, a pending root cause).
  std::function<void(const Attempt&)> chores;
};

class Attempt {
 public:
  /// What the workers of an attempt are, given its progress monitor (their progress sockets).
  using SpecFor = std::function<GroupSpec(const ProgressMonitor&)>;

  /// Spawns the workers of `assignment` on this node (`nproc_per_node` of them) as `spec_for` describes.
  /// `beat_every` > 0: heartbeats go on while they spawn (a standby still importing is waited for).
  /// Throws SpawnError when they cannot start.
  Attempt(const proto::Assignment& assignment, RendezvousBackend& rdzv, const std::string& progress_dir,
          int nproc_per_node, const HangPolicy& policy, const SpecFor& spec_for, std::chrono::milliseconds beat_every);
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  /// Supervises the workers until the attempt ends; `services` must outlive the call.
  AttemptResult run(const AttemptServices& services);

  int64_t round() const { return assignment.round; }
  /// This node's step account now, as milestones of this attempt (sent with a failure report).
  proto::AttemptMilestones account_now() const;
  /// Every mark this attempt reached, its step account included, as ages at `now`.
  proto::AttemptMilestones milestones(std::chrono::steady_clock::time_point now, const MemoryKeeper& memory) const;

  const proto::Assignment assignment;
  RendezvousBackend& rdzv;
  ProgressMonitor progress;

 private:
  // When the next heartbeat is due, and how many in a row failed.
  struct HeartbeatSchedule {
    std::chrono::steady_clock::time_point next;
    int failures = 0;
  };

  /// Starts the heartbeats that go on while the group spawns (every > 0); returns `spec`.
  GroupSpec beating_while_spawning(GroupSpec spec, std::chrono::milliseconds every);
  std::optional<AttemptResult> on_signals(const std::vector<int>& signals);
  std::optional<AttemptResult> on_worker_exits();
  /// A worker failed while the daemon restarts the round on purpose (a node admitted, a slow node replaced): another
  /// node stopped its workers first, so the failure is that restart's, not a fault. Asks the daemon (one heartbeat);
  /// the restart when it is one of those, else nothing.
  std::optional<AttemptResult> planned_restart();
  /// The hang watch's look; a suspicion judged with heartbeats going on. Late: said once across attempts (the
  /// run's reports); hung: the attempt ends.
  std::optional<AttemptResult> on_hang();
  /// Where this node stands in a hang inquiry.
  HangInquirySite inquiry_site() const;
  /// A hang: this node's culprit reported (through `keeper`, beating meanwhile), every rank's stacks printed, the
  /// workers stopped, the culprit's failure summary printed.
  void stop_for_hang(HeartbeatKeeper& keeper, HangJudgment& hung);
  /// The ranks' summaries for the daemon, with what the hang watch says of them.
  std::vector<proto::RankProgress> summaries(std::chrono::steady_clock::time_point now,
                                             std::optional<OffsetEstimate> node_clock = std::nullopt) const;
  /// Stops the workers (TERM, `grace`, KILL) with heartbeats going on meanwhile.
  void stop_workers(std::chrono::milliseconds grace, int first_signal = 15);
  /// One heartbeat: its reply's restart, failure, stragglers and arrival probe. `early`: sent beside the
  /// schedule with the ranks' arrival answers; its failure does not count towards losing the rendezvous.
  std::optional<AttemptResult> on_heartbeat(HeartbeatSchedule& schedule, bool early = false);

  std::optional<HeartbeatKeeper> spawning_;    // beats while the group spawns; gone once it has
  const AttemptServices* services_ = nullptr;  // while run() runs

 public:
  WorkerGroup group;
  HangWatch hangs;
  ArrivalRelay arrivals;
  AttemptClock clock;
};

}  // namespace meshrun::launcher

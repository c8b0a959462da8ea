// The rendezvous vocabulary carried in MESHRUN (0x40) requests. Each request is a JSON object with an
// "op" member; each response is a JSON object, or {"error": "..."} when the daemon refuses the request.
//
//   hello      {}                                  -> Hello
//   join       JoinRequest                         -> {"node_id", "round"}     (returns at once)
//   await      {run_id, node_id, timeout_s}        -> AwaitReply: waiting | assigned | failed
//   heartbeat  {run_id, node_id, progress?, clock?, attempt?} -> HeartbeatReply  (progress: [RankProgress],
//              clock: ClockReading, attempt: AttemptMilestones)
//   fail       {run_id, node_id, reason, cause?}   -> {}  (a worker failed or hung: every node re-rendezvouses)
//   failure    {run_id, node_id, failure}          -> {}  (FailureReport: recorded for the root cause, sent
//                                                          at once, before `fail`/`leave`)
//   leave      {run_id, node_id, reason, ok, attempt?} -> {goodput?}  (attempt: the node's last AttemptMilestones;
//              goodput: the run's GoodputReport as this node leaves, `ended` once it was the last)
//   status     {run_id?}                           -> StatusReply
//
// Round life cycle, per run:  OPEN --(max joined, or min joined + last call)--> CLOSED (ranks assigned)
//   CLOSED --(node dead / failure reported / late joiner waiting and room left)--> OPEN with round+1.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/rendezvous/goodput.hpp"

namespace meshrun::proto {

inline constexpr const char* kServerName = "meshrun-rendezvous";
/// Assignment::nodes lists every node only for rounds up to this size (status has the full list).
inline constexpr size_t kMaxNodesInAssignment = 32;
/// RunStatus::restarts keeps this many of a run's latest restarts (the counts by cause keep them all).
inline constexpr size_t kMaxRestartRecords = 16;

// The enumerated fields of the replies. On the wire each is its JSON string (listed beside each value);
// to_string() gives it, from_string<Enum>() reads it back and throws ProtocolError on an unknown one.

/// AwaitReply::status.
enum class AwaitStatus {
  kWaiting,   // "waiting": the round is still open
  kAssigned,  // "assigned": the round closed; `assignment` holds this node's ranks
  kFailed,    // "failed": the run failed, or this node's join did (`reason` says why)
  kFinished,  // "finished": the run completed while this node waited (a hot spare never needed)
};

/// HeartbeatReply::action: what the agent must do with its workers.
enum class HeartbeatAction {
  kContinue,  // "continue"
  kRestart,   // "restart": the round was invalidated; stop the workers and re-join
  kFail,      // "fail": the run failed for everyone
};

/// HeartbeatReply::cause: why the current round was opened.
enum class RestartCause {
  kNone,          // "": no restart yet (round 0)
  kNodeLost,      // "node_lost": a node missed its heartbeats
  kWorkerFailed,  // "worker_failed": a node reported a worker failure
  kNodeLeft,      // "node_left": a node left unsuccessfully
  kScaleUp,       // "scale_up": a node is waiting and the round has room
  kHung,          // "hung": a node's agent found a worker hung (silent past its progress budget, or stopped)
  kSlowNode,      // "slow_node": a node named slow for long enough made way for a hot spare (--replace-slow-nodes)
};

/// Where a restart's workers restored their state from (meshrun-trainer tells its agent; the worst over nodes).
enum class LoadSource {
  kUnknown,      // "": not told (a job that is not meshrun-trainer with copies in memory)
  kFresh,        // "fresh": nothing to restore, started at step 1
  kMemory,       // "memory": from the copies its own agents held
  kMemoryBuddy,  // "memory (buddy)": some ranks' copies came from another node (a lost node's buddy)
  kStorage,      // "storage": a checkpoint in checkpoint.dir
};

/// RunStatus::state.
enum class RunState {
  kOpen,      // "open": nodes are joining
  kClosed,    // "closed": ranks assigned
  kFinished,  // "finished": in the vocabulary, never reported: the daemon forgets a run once all nodes left
  kFailed,    // "failed"
};

std::string_view to_string(AwaitStatus value);
std::string_view to_string(HeartbeatAction value);
std::string_view to_string(RestartCause value);
std::string_view to_string(LoadSource value);
std::string_view to_string(RunState value);

/// Parses the wire name of `Enum`; throws ProtocolError naming the field and the known names.
template <typename Enum>
Enum from_string(std::string_view text);
template <>
AwaitStatus from_string<AwaitStatus>(std::string_view text);
template <>
HeartbeatAction from_string<HeartbeatAction>(std::string_view text);
template <>
RestartCause from_string<RestartCause>(std::string_view text);
template <>
RunState from_string<RunState>(std::string_view text);
template <>
LoadSource from_string<LoadSource>(std::string_view text);

struct Hello {
  std::string server;        // kServerName
  std::string version;       // meshrun version
  int64_t unix_time_ms = 0;  // daemon's wall clock, for skew checks
  std::string peer;          // how the daemon sees the caller ("ip:port")
};

/// --replace-slow-nodes and its times: whether a node whose ranks stay named stragglers makes way for a hot spare
/// (proto/rules/slow_node_rule.hpp has the rule). The run takes its first node's.
struct SlowNodePolicy {
  bool replace = false;      // off by default: an eviction restarts every worker (the work since the last save)
  double after_s = 60;       // named slow without a break this long before it may be evicted
  double cooldown_s = 1800;  // an evicted node is not taken back as a spare for this long
};

struct JoinRequest {
  std::string run_id;
  std::string host;          // host name, for messages
  std::string addr;          // address other nodes can reach this node at
  int local_world_size = 1;  // workers on this node
  int min_nodes = 1;
  int max_nodes = 1;
  int requested_rank = -1;          // --node-rank, or -1
  double last_call_timeout_s = 30;  // wait for stragglers after min_nodes joined
  double join_timeout_s = 600;      // give up joining after this
  double keep_alive_timeout_s = 3;  // declared dead after this long without a heartbeat
  int64_t pid = 0;
  double straggler_threshold = 1.3;  // a rank this many times slower than the run's median is named; 0: off
  bool evict_suspects = true;        // a hang verdict's suspect node makes way for a spare (--no-evict: false)
  SlowNodePolicy slow_nodes;         // --replace-slow-nodes
};

/// A range of one process group's collectives whose arrival times the daemon asks every rank for
/// (HeartbeatReply::arrival_probe); an empty group asks for nothing.
struct ArrivalProbe {
  std::string group;
  int64_t first_seq = 0;
  int64_t last_seq = 0;
};

/// What became of a run's arrival probes: only counted ones move a rank's figure, so a straggler that is
/// named late (or never) shows here why.
struct ArrivalProbeTally {
  int64_t counted = 0;
  int64_t imprecise = 0;  // the clock offsets were too uncertain for the range's span (or it took no time)
  int64_t partial = 0;    // some rank's recorder no longer held the whole range
  int64_t abandoned = 0;  // some rank never answered (its hook went quiet), or the round ended first
};

/// One rank's answer to an ArrivalProbe: when it entered the range's collectives (PyTorch's Flight Recorder
/// `time_created_ns`), already moved onto the daemon's clock with the offsets its agent measured.
struct ArrivalBlock {
  std::string group;  // empty: no answer
  int64_t first_seq = 0;
  int64_t last_seq = 0;
  int64_t count = 0;         // collectives of the range found in the recorder (all of them, or the block is void)
  double mean_unix_s = 0;    // mean entry time, on the daemon's clock
  double span_s = 0;         // last entry minus first entry (the rank's own clock: no offset involved)
  double uncertainty_s = 0;  // how far the offsets used may be off (half the round trips they came from)
};

/// One rank's progress as its agent sees it from the worker's beats and its collectives (docs/progress.md).
/// Agents send their ranks' with each heartbeat (bounded: one entry per local rank); the daemon adds the
/// straggler flag and the compute figure it derives from arrival times.
struct RankProgress {
  int rank = 0;
  int64_t step = 0;
  std::string phase;        // of the last beat ("train" when the beat named none)
  double step_time_s = 0;   // median of the recent step intervals; 0 until known
  double compute_s = 0;     // median of the recent compute_s the worker reported; 0 when it reports none
  double since_beat_s = 0;  // age of the last beat when the agent sent this
  double loss = 0;          // 0: not reported
  double tokens_per_s = 0;  // 0: not reported
  bool hung = false;        // the agent judged the rank hung
  bool late = false;        // others wait for it while it is busy (a save, an evaluation): not hung
  std::string late_reason;  // the late line: "rank 0 (node0) is late: it has not entered barrier #10 ..."
  bool straggler = false;   // the daemon judged the rank slow (status and heartbeat replies only)
  std::map<std::string, int64_t> collectives;  // process group -> last completed collective (meshrun's hook)
  ArrivalBlock arrivals;                       // the answer to the daemon's current probe, if any
  double arrival_compute_s = 0;                // daemon: compute per collective derived from arrival times; 0 unknown
};

/// Straggler::measure: what a rank's slowness was judged on.
enum class StragglerMeasure {
  kCompute,   // "compute": the compute_s the worker reports in its beats
  kArrivals,  // "arrivals": compute between collectives, derived from when each rank entered them
  kStepTime,  // "step_time": time per step from the beats (ranks that do not wait for each other)
};

/// A rank the daemon names as slow: its measure against the run's median.
struct Straggler {
  int rank = 0;
  std::string host;
  double seconds = 0;         // the rank's measure: per step, or per collective for kArrivals
  double median_seconds = 0;  // the same measure's median over the run's ranks
  StragglerMeasure measure = StragglerMeasure::kCompute;
};

/// How far a node's wall clock is from the daemon's, as its agent measured it from its heartbeats'
/// round trips (the one with the shortest round trip of the recent ones).
struct ClockReading {
  bool measured = false;
  double offset_s = 0;       // the node's clock minus the daemon's
  double uncertainty_s = 0;  // half that round trip
};

struct NodeInfo {
  std::string node_id;
  std::string host;
  std::string addr;
  int local_world_size = 0;
  int group_rank = -1;  // -1 until assigned
  int requested_rank = -1;
  double since_heartbeat_s = 0;
  bool alive = true;
  int64_t pid = 0;
  double cooldown_s = 0;            // a waiting node evicted as slow: seconds before it may be a spare again
  ClockReading clock;               // status only: its last heartbeat's clock reading
  std::vector<RankProgress> ranks;  // status only: the progress its agent last sent (empty without beats)
};

/// How far one node's attempt got since its workers started, as ages (seconds before the heartbeat left,
/// so no clock agreement is needed; -1: not reached). The daemon times each restart's phases from them.
struct AttemptMilestones {
  int64_t round = -1;             // the round whose workers these are
  double spawned_age_s = -1;      // every local worker spawned
  double initialized_age_s = -1;  // every local rank beat or completed its first collective
  double loaded_age_s = -1;       // every rank that beat "load" beat "ready" or a step after it
  double first_step_age_s = -1;   // every local rank beat its first step (a rank without beats: its
                                  // second collective completed, the first after the one that set it up)
  bool load_beats = false;        // some rank beat "load" (meshrun-trainer restoring a checkpoint)
  LoadSource load_source = LoadSource::kUnknown;
  StepAccount steps;  // how its beating rank spent the attempt since its first step (goodput)
};

/// One restart's cost, phase by phase (seconds; -1: not reached, or not known for this job), from the
/// fault to the first step after it. docs/daemon.md#the-recovery-ledger says where each boundary is read.
struct RecoveryLedger {
  double detect_s = -1;      // fault -> the first agent or the daemon knows it
  double stop_s = -1;        // -> the workers are gone on every node (the last survivor re-joined)
  double rendezvous_s = -1;  // -> the next round closed
  double start_s = -1;       // -> every node spawned its workers
  double init_s = -1;        // -> every rank's first beat or first collective
  double load_s = -1;        // -> every rank restored its checkpoint (phase beats; 0 when none loads)
  double first_step_s = -1;  // -> every rank beat its first step (without beats: its second collective)
  double total_s = -1;       // fault -> the last phase reached
  bool complete = false;     // every phase that can be told was reached
  LoadSource load_source = LoadSource::kUnknown;  // where the load phase read from
};

/// "6.2 s from the fault to the first step: detect 0.1 s, stop 0.8 s, ..."; a ledger still going names
/// the phases reached so far.
std::string describe(const RecoveryLedger& ledger);

/// What an agent learns when its round closes.
struct Assignment {
  int64_t round = 0;
  int group_rank = 0;
  int group_world_size = 0;
  int world_size = 0;           // sum of local_world_size over the round
  int rank_offset = 0;          // global rank of this node's local rank 0
  std::string master_addr;      // workers' TCPStore host: the daemon's host as the agent reaches it
  int master_port = 0;          // a store port private to this run (isolated key space)
  std::vector<NodeInfo> nodes;  // every node, in group-rank order (empty above kMaxNodesInAssignment)
  int64_t steps_done = -1;      // the highest step the run's ranks beat before this round (-1: none)
  // The run's secret, told only to agents that joined it (never to the workers, never in the workers' store):
  // the agents' copy port requires its proof (docs/security.md).
  std::string run_secret;
};

struct AwaitReply {
  AwaitStatus status = AwaitStatus::kWaiting;
  // waiting:
  std::vector<NodeInfo> joined;
  int min_nodes = 0;
  int max_nodes = 0;
  std::vector<int> missing_ranks;  // requested ranks < min_nodes not yet seen
  double waited_s = 0;
  double join_timeout_s = 0;
  bool spare = false;     // the round is closed with max_nodes: this node waits as a hot spare (no timeout)
  double cooldown_s = 0;  // evicted as slow: not taken back (not even as a spare) for this many more seconds
  // assigned:
  Assignment assignment;
  // failed: why (named "reason", not "error": an "error" member marks a refused request)
  std::string reason;
};

struct HeartbeatReply {
  int64_t round = 0;
  HeartbeatAction action = HeartbeatAction::kContinue;
  std::string reason;  // why a restart is needed (the event that opened the current round)
  RestartCause cause = RestartCause::kNone;
  int waiting_nodes = 0;
  std::vector<Straggler> stragglers;  // the run's slow ranks now (empty: none, or too few beats to tell)
  ArrivalProbe arrival_probe;         // the collectives whose arrival times the daemon wants (empty: none)
  int64_t server_unix_ns = 0;         // the daemon's wall clock as it answered (the agent's clock reading)
  int64_t recovered_round = 0;        // the latest round whose recovery ledger is complete (0: none)
  RecoveryLedger recovery;            // ... and that ledger
  std::string slow_nodes;             // why a slow node keeps its seat (--replace-slow-nodes), once per streak
};

/// A failed (or hung) worker, as its agent reports it at once. The daemon orders a round's reports by
/// time: the first is the job's root cause, the others its consequences (status `failures`).
inline constexpr size_t kMaxFailureReports = 64;  // per run: the latest failing round's first reports
inline constexpr size_t kMaxTracebackLines = 8;
struct FailureReport {
  int64_t round = 0;  // the round whose worker failed
  int rank = 0;
  int local_rank = 0;
  std::string host;
  std::string node_id;  // set by the daemon
  double age_s = 0;     // agent -> daemon: seconds from the failure to the report (no clock skew)
  int64_t unix_ms = 0;  // set by the daemon: its clock at the report, minus age_s
  RestartCause cause = RestartCause::kWorkerFailed;  // worker_failed or hung
  std::string exit;                                  // "exit code 1", "signal SIGSEGV (11)", or the hang
  std::string error;                   // "RuntimeError: boom", from error.json or the Python traceback on stderr
  int64_t step = -1;                   // hung: the last step the rank beat (-1: unknown)
  std::vector<std::string> traceback;  // its innermost frames (File ..., line N, in f + the code line)
  std::string hang_kind;  // hung: the verdict's kind (launcher/hang/hang_verdict.hpp: never_entered, stopped...)
};

/// One re-rendezvous of a run (status only): the round it opened, why, and how long ago.
struct RestartRecord {
  int64_t round = 0;
  RestartCause cause = RestartCause::kNone;
  std::string reason;
  double since_s = 0;
  RecoveryLedger recovery;  // partial until the first step after it (or a further restart cut it short)
  std::string replaced;     // the spare that took a lost or evicted node's rank ("host (pid N) for node 2")
};

/// A node evicted as slow (--replace-slow-nodes), with the figures the rule weighed (slow_node_rule.hpp).
struct SlowNodeEviction {
  int64_t round = 0;  // the round it was evicted from
  int node_rank = -1;
  std::string host;
  int64_t pid = 0;
  double slowdown = 0;    // its slowest rank's measure / the run's median
  double slow_for_s = 0;  // named slow without a break this long
  double loss_s = 0;      // the job's progress staying would lose over the rule's horizon
  double cost_s = 0;      // the restart's estimated cost: recovery_s + redo_s
  double recovery_s = 0;  // the last restart's recovery (or the rule's default before the first)
  double redo_s = -1;     // work since the last checkpoint, done again (-1: not known: the script does not beat)
  double since_s = 0;     // status: seconds since the eviction
  double cooldown_s = 0;  // status: seconds left before it may be a spare again (0: over)
  std::string line;       // "node 1 (host-b) evicted: ..."
};

struct RunStatus {
  std::string run_id;
  int64_t round = 0;
  RunState state = RunState::kOpen;
  int min_nodes = 0;
  int max_nodes = 0;
  std::vector<NodeInfo> nodes;
  std::vector<NodeInfo> waiting;  // joined while the round was closed: spares when the round is full
  int spares = 0;                 // of `waiting`, those that wait as hot spares (the round has max_nodes)
  std::vector<int> missing_ranks;
  std::vector<std::string> duplicate_ranks;  // "rank 1: host-a, host-b"
  std::string last_event;
  int master_port = 0;
  int64_t keys = 0;
  std::vector<RestartRecord> restarts;               // the last kMaxRestartRecords, oldest first
  std::map<std::string, int64_t> restarts_by_cause;  // every restart of the run, by cause wire name
  std::map<std::string, int64_t> hangs_by_kind;      // every hang reported in the run, by verdict kind
  std::vector<FailureReport> failures;               // the latest failing round's, first (by time) first
  GoodputReport goodput;                             // the run's wall time so far, split (goodput.hpp)
  ArrivalProbeTally arrival_probes;                  // the straggler measure without beats (arrival_timing)
  std::vector<SlowNodeEviction> evictions;           // nodes evicted as slow, the latest kMaxRestartRecords
  int64_t slow_node_evictions = 0;                   // ... all of them
  std::string slow_nodes;                            // why a slow node keeps its seat now (empty: none is)
};

struct StatusReply {
  std::string server;
  std::string version;
  double uptime_s = 0;
  int64_t keys = 0;  // keys in the shared (main port) store
  int connections = 0;
  std::vector<RunStatus> runs;
};

// JSON mapping: member names are the JSON keys; missing keys keep their defaults (older peers).
// The enums travel as their wire names (a JSON string that is not one of them is a ProtocolError).
void to_json(nlohmann::json& j, AwaitStatus value);
void to_json(nlohmann::json& j, HeartbeatAction value);
void to_json(nlohmann::json& j, RestartCause value);
void to_json(nlohmann::json& j, LoadSource value);
void to_json(nlohmann::json& j, RunState value);
void to_json(nlohmann::json& j, StragglerMeasure value);
void from_json(const nlohmann::json& j, AwaitStatus& value);
void from_json(const nlohmann::json& j, HeartbeatAction& value);
void from_json(const nlohmann::json& j, RestartCause& value);
void from_json(const nlohmann::json& j, LoadSource& value);
void from_json(const nlohmann::json& j, RunState& value);
void from_json(const nlohmann::json& j, StragglerMeasure& value);

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Hello, server, version, unix_time_ms, peer)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SlowNodePolicy, replace, after_s, cooldown_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(JoinRequest, run_id, host, addr, local_world_size, min_nodes, max_nodes,
                                                requested_rank, last_call_timeout_s, join_timeout_s,
                                                keep_alive_timeout_s, pid, straggler_threshold, evict_suspects,
                                                slow_nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ArrivalProbe, group, first_seq, last_seq)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ArrivalProbeTally, counted, imprecise, partial, abandoned)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ArrivalBlock, group, first_seq, last_seq, count, mean_unix_s, span_s,
                                                uncertainty_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RankProgress, rank, step, phase, step_time_s, compute_s, since_beat_s,
                                                loss, tokens_per_s, hung, late, late_reason, straggler, collectives,
                                                arrivals, arrival_compute_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Straggler, rank, host, seconds, median_seconds, measure)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ClockReading, measured, offset_s, uncertainty_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NodeInfo, node_id, host, addr, local_world_size, group_rank,
                                                requested_rank, since_heartbeat_s, alive, pid, cooldown_s, clock, ranks)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttemptMilestones, round, spawned_age_s, initialized_age_s,
                                                loaded_age_s, first_step_age_s, load_beats, load_source, steps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RecoveryLedger, detect_s, stop_s, rendezvous_s, start_s, init_s, load_s,
                                                first_step_s, total_s, complete, load_source)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Assignment, round, group_rank, group_world_size, world_size,
                                                rank_offset, master_addr, master_port, nodes, steps_done, run_secret)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AwaitReply, status, joined, min_nodes, max_nodes, missing_ranks,
                                                waited_s, join_timeout_s, spare, cooldown_s, assignment, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HeartbeatReply, round, action, reason, cause, waiting_nodes, stragglers,
                                                arrival_probe, server_unix_ns, recovered_round, recovery, slow_nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FailureReport, round, rank, local_rank, host, node_id, age_s, unix_ms,
                                                cause, exit, error, step, traceback, hang_kind)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RestartRecord, round, cause, reason, since_s, recovery, replaced)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SlowNodeEviction, round, node_rank, host, pid, slowdown, slow_for_s,
                                                loss_s, cost_s, recovery_s, redo_s, since_s, cooldown_s, line)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunStatus, run_id, round, state, min_nodes, max_nodes, nodes, waiting,
                                                spares, missing_ranks, duplicate_ranks, last_event, master_port, keys,
                                                restarts, restarts_by_cause, hangs_by_kind, failures, goodput,
                                                arrival_probes, evictions, slow_node_evictions, slow_nodes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StatusReply, server, version, uptime_s, keys, connections, runs)

}  // namespace meshrun::proto

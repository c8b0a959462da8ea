// Membership: the rendezvous rounds of every run, as a pure state machine over an injected Clock.
// The server feeds it requests and calls tick() periodically; tests drive it with a FakeClock.
//
// Per run:
//   OPEN    nodes join. Closes when max_nodes joined, or when min_nodes joined and the last-call
//           window passed with no new joiner, or when every survivor of the previous round is back.
//   CLOSED  ranks assigned. Joiners go to the wait list. The round is invalidated (round+1, OPEN
//           again, survivors must re-join) when: a node misses heartbeats past its keep-alive timeout,
//           a node reports a worker failure, a node leaves unsuccessfully, or a node is waiting and
//           the round has room (scale-up). If the survivors of a death are fewer than min_nodes the
//           run FAILS with a message naming the dead node.
//   FINISHED every node left successfully; the run is forgotten.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "rendezvous/failure_log.hpp"
#include "rendezvous/run_telemetry.hpp"
#include "rendezvous/slow_node_watch.hpp"

namespace meshrun::rendezvous {

class Membership {
 public:
  explicit Membership(const Clock& clock) : clock_(clock) {}

  /// Adds a node to the run's current (or, when closed, next) round. Returns the node id.
  /// Throws RemoteError for conflicting requests (duplicate node rank, inconsistent sizes).
  std::string join(const proto::JoinRequest& request);
  /// The node's status now: assigned, failed, or waiting (with progress).
  proto::AwaitReply poll(const std::string& run_id, const std::string& node_id) const;
  /// True when poll() would return something other than "waiting" (cheap).
  bool settled(const std::string& run_id, const std::string& node_id) const;
  /// Marks a node as blocked in an await (it is alive while it waits).
  void set_awaiting(const std::string& run_id, const std::string& node_id, bool awaiting);
  /// The connection the node awaits on closed: its agent is gone (a round no longer waits for it as a
  /// survivor; its keep-alive still decides when it is lost).
  void connection_closed(const std::string& run_id, const std::string& node_id);
  /// `progress`: the node's ranks as its agent sees them (kept for status and straggler detection);
  /// `clock`: how far the node's clock is from the daemon's (status only).
  /// `attempt`: how far the node's workers got (times the phases of the restart that started them).
  proto::HeartbeatReply heartbeat(const std::string& run_id, const std::string& node_id,
                                  std::vector<proto::RankProgress> progress = {}, proto::ClockReading clock = {},
                                  const proto::AttemptMilestones& attempt = {});
  /// `cause` is kWorkerFailed or kHung.
  /// Records a failed worker of the node (`failure.unix_ms` set by the caller, whose clock reads
  /// `now_unix_ms`) for the root cause. A hang also names, from the heartbeats, a rank on another node
  /// that got less far (hung_elsewhere): the node that noticed first is not always the culprit's.
  /// `attempt`: the node's step account as its attempt ends, for the goodput ledger.
  void record_failure(const std::string& run_id, const std::string& node_id, proto::FailureReport failure,
                      int64_t now_unix_ms, const proto::AttemptMilestones& attempt = {});
  void report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason,
                      proto::RestartCause cause = proto::RestartCause::kWorkerFailed);
  /// `attempt`: the node's last milestones (its final step account). Returns the run's goodput as the node
  /// leaves (`ended` when it was the last), or nothing when it left no run it took part in.
  std::optional<proto::GoodputReport> leave(const std::string& run_id, const std::string& node_id,
                                            const std::string& reason, bool ok,
                                            const proto::AttemptMilestones& attempt = {});
  /// Applies deadlines (last call, keep-alive expiry, join timeouts). Returns true if anything changed.
  bool tick();

  /// Status of all runs (or one). Keys counts are filled in by the server.
  std::vector<proto::RunStatus> status(const std::string& run_id = "") const;
  /// Runs whose store port the server must keep; the server sets it once per run.
  void set_master_port(const std::string& run_id, int port);
  int master_port(const std::string& run_id) const;
  /// Runs that finished (all nodes left) since the last call; the server frees their store port.
  std::vector<std::string> take_finished_runs();
  bool has_run(const std::string& run_id) const { return runs_.count(run_id) != 0; }
  /// Increments whenever some await may have become settled (round closed or invalidated, errors).
  uint64_t version() const { return version_; }

 private:
  static constexpr auto kSlowNodeJudgeEvery = std::chrono::seconds(1);  // how often a run's slow nodes are weighed

  struct Node {
    proto::JoinRequest request;
    std::string id;
    TimePoint joined_at;
    TimePoint last_seen;
    bool awaiting = false;
    bool finished = false;      // left successfully: no more heartbeats expected
    bool disconnected = false;  // the connection it awaits on closed: its agent is gone
    int group_rank = -1;
    int previous_rank = -1;                     // a survivor's node rank in the last round (kept when free)
    int rank_offset = 0;                        // global rank of its local rank 0, set when the round closes
    bool participant = false;                   // in `participants` (not waiting): an O(log n) test for every await
    std::string error;                          // set when this node's join failed (timeout, conflict)
    std::vector<proto::RankProgress> progress;  // from its last heartbeat, this round
    proto::ClockReading clock;                  // from its last heartbeat
  };
  /// A node of the invalidated round that has not re-joined yet. Keyed by "host/pid": its node id
  /// changes when it re-joins, its host and pid do not.
  struct Survivor {
    int rejoins_expected = 0;          // above 1 only when agents share a host and pid
    TimePoint last_seen;               // its last sign of life (heartbeat or re-join), before the restart too
    bool heard_since_restart = false;  // alive after the restart: stopping its workers, it gets the stop grace
    bool disconnected = false;         // its agent's connection closed: gone, not waited for
    double keep_alive_timeout_s = 0;   // its own, from its join request
    int previous_rank = -1;            // its node rank in the last round: it keeps it
  };
  struct Run {
    std::string id;
    std::string secret;  // handed to every agent in its assignment (the agents' copy port)
    int min_nodes = 1;
    int max_nodes = 1;
    int64_t round = 0;
    bool closed = false;
    std::string fatal_error;                     // non-empty: the run failed for everyone
    std::vector<std::string> participants;       // node ids of the current round, in join order
    std::vector<std::string> waiting;            // joined while closed: admitted next round
    std::map<std::string, Node> nodes;           // participants + waiting
    std::map<std::string, Survivor> survivors;   // "host/pid" -> survivor of the last round not back yet
    std::map<std::string, std::string> retired;  // node id in the last round -> its "host/pid"
    std::string evicted;  // "host/pid" of the hang suspect that made way for a spare: it re-joins as a spare
    proto::RestartCause restart_cause = proto::RestartCause::kNone;  // why the current round was opened
    std::string restart_reason;
    FailureLog failures;       // the root cause and its consequences (a hang's suspect may make way for a spare)
    RunTelemetry telemetry;    // restarts, recovery, goodput, stragglers: measured, not deciding
    SlowNodeWatch slow_nodes;  // --replace-slow-nodes: who has been slow how long, evictions, cool-downs
    std::optional<TimePoint> slow_nodes_judged;  // when the slow-node rule was last asked
    std::optional<TimePoint> last_call_deadline;
    std::vector<std::string> duplicate_ranks;
    std::vector<proto::NodeInfo> assigned;  // snapshot at close, group-rank order
    int world_size = 0;                     // workers of the closed round
    std::string last_event;
    int master_port = 0;
    int finished_nodes = 0;
    uint64_t next_node = 0;

    bool has_participant(const std::string& node_id) const;
  };

  Run& run_for_join(const proto::JoinRequest& request);
  /// Refuses (RemoteError) a node rank that another node of the same round already requested.
  void check_duplicate_rank(Run& run, const proto::JoinRequest& request);
  /// Counts a re-joining survivor of the last round as back. Returns the node rank it had (-1: none).
  int survivor_returned(Run& run, const proto::JoinRequest& request);
  void maybe_close(Run& run);
  /// More than max nodes (every survivor back, with spares promoted): the spare that joined last waits
  /// again (the last joiner when none of them is a spare), until the round has max nodes.
  void trim_to_max(Run& run);
  /// A participant of the closed round left successfully; the run ends (and is forgotten) with its last.
  /// Returns the run's goodput as of now (`ended` for the last).
  proto::GoodputReport finish_node(Run& run, Node& node);
  /// How many hot spares the run has now (waiting nodes of a closed round that has max nodes, not cooling down).
  int spare_count(const Run& run) const;
  /// A waiting node evicted as slow whose cool-down is not over: it takes no seat, not even as a spare.
  bool cooling(const Run& run, const Node& node) const;
  /// The waiting nodes that may take a seat (not cooling down), in the order they joined.
  std::vector<std::string> ready_waiting(const Run& run) const;
  /// --replace-slow-nodes: asks the slow-node rule at a heartbeat of the closed round (at most every
  /// kSlowNodeJudgeEvery), given the ranks named stragglers now (`slow`); on its verdict, opens the next round
  /// without the slow node, which cools down. True when it did.
  bool replace_slow_node(Run& run, const std::vector<proto::Straggler>& slow);
  /// The closed round's nodes whose ranks are among `slow`.
  std::vector<NamedSlowNode> slow_nodes_now(const Run& run, const std::vector<proto::Straggler>& slow) const;
  /// "spare host-d (pid 7) took node rank 1" for the nodes of a closing round that were not in the last one.
  std::string replacements(const Run& run) const;
  void close_round(Run& run);
  /// Opens round+1 for `cause`. `lost_node` (dead, gone or evicted) is not counted among the survivors.
  void invalidate(Run& run, proto::RestartCause cause, const std::string& reason, std::string lost_node = "");
  /// The node a hang verdict of the closed round named (its agent reported the culprit), when it may make
  /// way for a spare: its node id, or "".
  std::string hang_suspect_to_evict(const Run& run) const;
  /// `node_id`, a node of the last round, was heard from after the restart (a heartbeat, a failure report).
  void heard_from_survivor(Run& run, const std::string& node_id);
  /// Survivors that neither re-joined nor heartbeat within the re-join window are lost.
  void expire_survivors(Run& run);
  /// Drops waiting nodes (spares) of a closed round that are neither in an await nor heard from lately.
  bool expire_waiting(Run& run);
  /// Invalidates a closed round whose participant missed its keep-alive. True when it did.
  bool expire_participants(Run& run);
  /// Drops silent joiners, fails those past their join timeout, closes the round when it may.
  bool tick_open_round(Run& run);
  std::string join_timeout_error(const Run& run, const Node& node) const;
  /// The silent rank of another node with the lowest step below `hang.step` (ties: silent longest), as a
  /// report dated at its last beat; nothing when there is none or it was reported already.
  std::optional<proto::FailureReport> hung_elsewhere(const Run& run, const std::string& reporter,
                                                     const proto::FailureReport& hang, int64_t now_unix_ms) const;
  /// The round's slow ranks, from the progress its participants sent (straggler.hpp).
  std::vector<proto::Straggler> stragglers(const Run& run) const;
  std::vector<HostedRank> hosted_ranks(const Run& run) const;
  double straggler_threshold(const Run& run) const;
  void remove_node(Run& run, const std::string& node_id);
  proto::NodeInfo info(const Node& node) const;
  proto::Assignment assignment(const Run& run, const Node& node) const;
  std::vector<int> missing_ranks(const Run& run) const;
  const Run* find_run(const std::string& run_id) const;
  Run* find_run(const std::string& run_id);

  const Clock& clock_;
  std::map<std::string, Run> runs_;
  std::vector<std::string> finished_;
  std::deque<std::string> completed_;  // the latest runs that ended well: a spare still waiting is told so
  uint64_t version_ = 0;
};

}  // namespace meshrun::rendezvous

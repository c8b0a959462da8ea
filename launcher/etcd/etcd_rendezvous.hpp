// EtcdRendezvous: --rdzv-backend etcd-v3. The rendezvous state lives in an etcd cluster (run_record.hpp
// has the keys), so no meshrun process is a single point of failure for it:
//   liveness   each agent holds a lease (TTL = keep-alive interval x max attempts) and renews it with
//              its heartbeats; its node key vanishes when it stops
//   ranks      the round closes by a compare-and-swap of the state key on its revision, guarded by the
//              round's node keys being unchanged since they were read; requested ranks are claimed by
//              create-if-absent keys, so a duplicate is refused naming both hosts
//   waiting    watches on the run's prefix, never polling
//   restarts   any agent that sees a member's key gone, a failure, or a waiting node opens the next
//              round (the same compare-and-swap); the others learn it from their next heartbeat
// The workers' store (MASTER_ADDR/MASTER_PORT) is served by the agent of node rank 0 of each round, on
// a fresh port per round, as torchrun does with etcd; when that node is lost, the survivors' next
// round has a new node rank 0 and a new, empty store.
// Goodput: with no daemon, each agent keeps the goodput ledger of the run as it sees it, from its own join
// (its restarts, its ranks' step accounts), prints it when it leaves and puts it in etcd
// (RunKeys::goodput, outside the run's prefix, which node rank 0 deletes at the end).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/signal_set.hpp"
#include "launcher/etcd/etcd_client.hpp"
#include "launcher/etcd/run_record.hpp"
#include "launcher/etcd/slow_node_judge.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"
#include "launcher/rdzv/rendezvous_settings.hpp"
#include "proto/rules/goodput_ledger.hpp"

namespace meshrun::rendezvous {
class Server;
}

namespace meshrun::launcher {

class EtcdRendezvous final : public RendezvousBackend {
 public:
  /// Grants this node's lease, retrying the members until the join timeout (then TimeoutError naming them).
  EtcdRendezvous(const RendezvousSettings& options, SignalSet& signals);
  /// Revokes the lease (this node's keys go at once) and stops the workers' store it served.
  ~EtcdRendezvous() override;
  EtcdRendezvous(const EtcdRendezvous&) = delete;
  EtcdRendezvous& operator=(const EtcdRendezvous&) = delete;

  std::optional<proto::Assignment> join() override;
  proto::HeartbeatReply heartbeat(const std::vector<proto::RankProgress>& progress,
                                  const proto::AttemptMilestones& attempt) override;
  void report_failure(const std::string& reason, proto::RestartCause cause) override;
  void record_failure(const proto::FailureReport& failure, const proto::AttemptMilestones& attempt) override;
  std::vector<proto::FailureReport> failures() override;
  std::optional<proto::GoodputReport> leave(const std::string& reason, bool ok,
                                            const proto::AttemptMilestones& attempt) override;
  void wait_for_other_nodes() override;
  /// Nothing to do: the state is in etcd, where every node reads why the run ended.
  void linger_for_others() override {}

  int interrupted_by() const override { return interrupted_by_; }
  const std::string& run_id() const override { return run_id_; }
  const Endpoint& endpoint() const override { return options_.etcd_endpoints.front(); }
  std::string endpoint_text() const override { return client_.endpoints_text(); }
  const std::string& hostname() const override { return hostname_; }

 private:
  /// The state key as read (absent: exists is false) with the revision a compare-and-swap needs.
  struct Snapshot {
    etcd::RunRecord run;
    int64_t mod_revision = 0;
    int64_t revision = 0;  // the store's, when read
    bool exists = false;
  };
  /// The round's keys as read in one revision.
  struct RoundView {
    std::vector<proto::NodeInfo> joined;  // join order
    std::set<std::string> alive;          // node ids holding their key
    std::set<std::string> done;           // node ids that left
    std::set<std::string> reported;       // node ids that reported a worker's failure or hang
    std::optional<Endpoint> store;
    std::map<std::string, etcd::NodeProgress> progress;  // node id -> its ranks' progress
    std::optional<etcd::SlowNodeJudgement> judged;       // node rank 0's judgement, once put
    int64_t revision = 0;
  };

  /// Where join() is: its deadlines and the last call's start (by this node's clock).
  struct JoinWait {
    std::chrono::steady_clock::time_point start{};
    std::chrono::steady_clock::time_point deadline{};
    std::chrono::steady_clock::time_point next_note{};  // when the user next hears what it waits for
    std::chrono::steady_clock::time_point min_joined_at{};
    int64_t min_joined_round = -1;  // the round min_joined_at is for; -1: fewer than min_nodes joined
    bool saw_run = false;           // the run's state was there during this join (its end is then news)
    bool told_cooling = false;      // an evicted slow node said it cools down
  };

  /// join() without the goodput ledger's bookkeeping: waits for this node's next assignment.
  std::optional<proto::Assignment> join_round();
  /// heartbeat() without the ledger: renews the lease, puts this node's progress when it moved, and reads whether
  /// the round still stands and what node rank 0 judged of its stragglers.
  proto::HeartbeatReply check_round(const std::vector<proto::RankProgress>& progress);
  /// Node rank 0: names the stragglers from every node's progress, publishes them when they change, and evicts a
  /// slow node when the rule says it pays (true: the round was ended for it).
  bool judge_round(const Snapshot& s, const RoundView& view, const etcd::RangeResult& spares,
                   proto::HeartbeatReply& reply);
  /// A node evicted as slow waits out its cool-down without entering rounds (true: it waits).
  bool wait_cooling(const Snapshot& s, JoinWait& wait);
  /// A spare of a full round says so in etcd (a key on its lease), for node rank 0's slow-node rule.
  void mark_spare();
  std::string spare_key() const;
  /// This agent as rounds know it across re-joins: its survivor_key, "host/pid".
  std::string identity() const;
  /// Feeds this node's milestones to its goodput ledger and the run's high-water step.
  void note_account(const proto::AttemptMilestones& attempt);
  /// With no state in etcd: throws RunFinished when the run this node waited for ended well (etcd holds its
  /// end marker); a node that never saw the run deletes the marker and starts the id afresh.
  void check_finished(const JoinWait& wait);
  /// Refuses (RemoteError) a run whose --nnodes differs from this node's.
  void check_sizes(const etcd::RunRecord& run) const;
  /// A failed run: its error, or a fresh start when its nodes are all gone.
  void on_failed_run(const Snapshot& s);
  /// This node's assignment when it is a member; else a late joiner's scale-up, or a wait.
  std::optional<proto::Assignment> on_closed_round(const Snapshot& s, JoinWait& wait);
  /// Enters the round, closes it when it may, or waits for a change (or the last call's end).
  void on_open_round(const Snapshot& s, JoinWait& wait);
  /// Compare-and-swap to closed with `members`, if no node joined since `view` was read.
  void close_round(const Snapshot& s, const RoundView& view, std::vector<proto::NodeInfo> members);

  Snapshot read_state();
  static Snapshot snapshot_of(const etcd::RangeResult& state_range);
  static RoundView view_of(const std::string& round_prefix, const etcd::RangeResult& round_range);
  /// The state, created (round 0, open) when this is the run's first node (after check_finished).
  Snapshot ensure_state(const JoinWait& wait);
  RoundView read_round(int64_t round);
  /// Compare-and-swap of the state; false when someone else changed it first.
  bool replace_state(const Snapshot& seen, const etcd::RunRecord& next);
  /// Puts this node's key (and its --node-rank claim) into the open round; false when the state moved.
  bool enter_round(const Snapshot& seen);
  /// The assignment once the round closed with this node in it: node rank 0 starts the store and
  /// publishes it, the others wait for it. nullopt when the round moved on meanwhile.
  std::optional<proto::Assignment> assignment(const Snapshot& closed);
  /// The assignment with the run's secret as agents use it (etcd keeps it sealed with the join token).
  proto::Assignment sealed_secret_opened(proto::Assignment a) const;
  /// Waits for any change under the run's prefix after `revision`, at most `wait`.
  void wait_for_change(int64_t revision, std::chrono::milliseconds wait);
  /// Waits for a change of the run's state key only (a new round, the run's end), at most `wait`: a spare or a
  /// node cooling down is not woken by every node's progress.
  void wait_for_state(int64_t revision, std::chrono::milliseconds wait);
  /// One watch of `key` (to `range_end`) from after `revision`; a failed one is said, and waited a little.
  void watch(const std::string& key, const std::string& range_end, int64_t revision, std::chrono::milliseconds wait);
  /// Renews the lease when due (every keep-alive interval); a lease that expired is granted anew.
  void renew_lease(bool force);
  bool check_signals();

  const RendezvousSettings& options_;
  SignalSet& signals_;
  etcd::EtcdClient client_;
  etcd::RunKeys keys_;
  std::string run_id_;
  std::string hostname_;
  std::string addr_;  // how the other nodes reach this one (the workers' store when node rank 0)
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point lease_renewed_{};
  std::string node_id_;                        // this node in the current round (host:pid:round)
  int64_t entered_round_ = -1;                 // the round this node's key was put into
  int64_t assigned_round_ = -1;                // the closed round this node's workers run in
  etcd::RunRecord assigned_run_;               // ... as it closed
  std::unique_ptr<rendezvous::Server> store_;  // node rank 0: the workers' store
  int interrupted_by_ = 0;
  proto::GoodputLedger goodput_;                                // the run's wall time as this node saw it
  int64_t steps_beaten_ = -1;                                   // the highest step this node's ranks beat
  std::optional<std::chrono::steady_clock::time_point> fault_;  // the attempt's first fault seen here
  std::string progress_put_;                    // this node's progress key as last put (without the beats' ages)
  std::unique_ptr<etcd::SlowNodeJudge> judge_;  // node rank 0 of the assigned round
  std::string judged_put_;                      // ... and what it put last (JSON)
  bool spare_marked_ = false;                   // this node's w/ key is put
};

}  // namespace meshrun::launcher

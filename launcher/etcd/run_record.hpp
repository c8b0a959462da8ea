// The etcd backend's rendezvous state and the pure decisions over it (no I/O: unit-tested alone).
//
// A run lives under "/meshrun/rdzv/<run id>/" (RunKeys):
//   state                    RunRecord (JSON): round, phase, why it opened, the closed round's members.
//                            Every change of it is a compare-and-swap on its mod revision.
//   r/<round>/n/<node id>    a joined node (NodeInfo), on the node's lease: it vanishes when the node
//                            stops renewing (dead host, SIGSTOP, partition)
//   r/<round>/rank/<k>       claim of a requested --node-rank (on the lease): duplicates are refused
//   r/<round>/store          "addr:port" of the workers' store, served by the agent of node rank 0
//   r/<round>/done/<node id> {"ok", "reason"}: the node left (not on the lease: it outlives the node)
//   r/<round>/f/<node>/<rank> FailureReport: the root cause across nodes
//   r/<round>/p/<node id>    its ranks' RankProgress (on the lease), put when a step moved: the stragglers' figures
//   r/<round>/judged         SlowNodeJudgement (slow_node_judge.hpp), put by node rank 0's agent when it changes
//   w/<host>:<pid>           a hot spare waiting for a seat (on its lease): the slow-node rule counts them
// and outside it, since node rank 0 deletes the run's prefix when the job ends:
// "/meshrun/goodput/<run id>/<host>/<pid>"  GoodputReport: the run as that node saw it, put when it left
//                            (kept: a record of the job; delete the prefix when done with it)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::launcher::etcd {

enum class RoundPhase {
  kOpen,    // "open": nodes are joining
  kClosed,  // "closed": ranks assigned (members)
  kFailed,  // "failed": the run failed for everyone (reason)
};

struct RunRecord {
  int64_t round = 0;
  RoundPhase phase = RoundPhase::kOpen;
  int min_nodes = 1;
  int max_nodes = 1;
  proto::RestartCause cause = proto::RestartCause::kNone;  // why this round was opened
  std::string reason;                                      // ... in words; kFailed: why the run failed
  std::vector<std::string> survivors;                      // "host/pid" of the last round's nodes expected back
  std::map<std::string, int> previous_ranks;               // "host/pid" -> node rank in the last round (kept)
  std::vector<proto::NodeInfo> members;                    // kClosed: the round's nodes, group-rank order
  std::string secret;  // the run's secret: set when the run is created, kept every round (Assignment::run_secret)
  // "host/pid" -> unix ms: a node evicted as slow (--replace-slow-nodes) is not seated, not even as a spare, until then
  std::map<std::string, int64_t> cooling;
  std::string evicted;  // "host/pid" evicted as slow for this round: not seated in it, whatever its cool-down
};

void to_json(nlohmann::json& j, const RunRecord& run);
void from_json(const nlohmann::json& j, RunRecord& run);

/// The keys of one run.
struct RunKeys {
  std::string prefix;  // "/meshrun/rdzv/<run id>/"

  std::string finished;  // outside the prefix (deleted at the end): the run ended well; a spare still waiting exits 0

  explicit RunKeys(const std::string& run_id)
      : prefix("/meshrun/rdzv/" + run_id + "/"), finished("/meshrun/rdzv-finished/" + run_id) {}
  std::string state() const { return prefix + "state"; }
  std::string round(int64_t r) const { return prefix + "r/" + std::to_string(r) + "/"; }
  std::string nodes(int64_t r) const { return round(r) + "n/"; }
  std::string node(int64_t r, const std::string& id) const { return nodes(r) + id; }
  std::string rank_claim(int64_t r, int rank) const { return round(r) + "rank/" + std::to_string(rank); }
  std::string store(int64_t r) const { return round(r) + "store"; }
  std::string done(int64_t r) const { return round(r) + "done/"; }
  std::string failures(int64_t r) const { return round(r) + "f/"; }
  std::string progress(int64_t r) const { return round(r) + "p/"; }
  std::string judged(int64_t r) const { return round(r) + "judged"; }
  std::string spares() const { return prefix + "w/"; }
  std::string goodput(const std::string& run_id, const std::string& host, int64_t pid) const {
    return "/meshrun/goodput/" + run_id + "/" + host + "/" + std::to_string(pid);
  }
};

/// "host/pid": how a node is recognised across rounds (its node id changes when it re-joins).
std::string survivor_key(const proto::NodeInfo& node);

/// The nodes that take the round's seats, in group-rank order, when the round closes now by the shared
/// round policy (proto/rules/round_policy.hpp), or nothing. `run.survivors`: those of the last round that may
/// still come back (live_survivors). `reported`: survivors (survivor_key) that reported their own workers'
/// failure in the last round: known alive, they are due, and a spare does not take their seat. One that
/// said nothing may be the node that was lost.
/// A node cooling down at `now_unix_ms`, or evicted for this round, is never seated.
std::optional<std::vector<proto::NodeInfo>> close_now(const RunRecord& run, const std::vector<proto::NodeInfo>& joined,
                                                      bool last_call_passed,
                                                      const std::vector<std::string>& reported = {},
                                                      int64_t now_unix_ms = 0);

/// Seconds before the node `key` (survivor_key) may be seated again after its eviction as slow (0: it may).
double cooldown_left_s(const RunRecord& run, const std::string& key, int64_t now_unix_ms);

/// The survivors of the last round that may still come back: those that joined this round or still
/// hold their key of the last round (`previous`: its live nodes). A dead one is not waited for.
std::vector<std::string> live_survivors(const RunRecord& run, const std::vector<proto::NodeInfo>& previous,
                                        const std::vector<proto::NodeInfo>& joined);

/// The record of the round after `closed` for `cause`. `lost_node` (dead or gone; may be empty) is not
/// counted among the survivors; fewer survivors than min_nodes fail the run. The cool-downs carry over.
RunRecord next_round(const RunRecord& closed, proto::RestartCause cause, const std::string& reason,
                     const std::string& lost_node);

/// The round after `closed` when member `node_id` (`identity`: its survivor_key) is evicted as slow for a waiting hot
/// spare (--replace-slow-nodes): it is no survivor, and it cools down until `until_unix_ms` (cool-downs over at
/// `now_unix_ms` are dropped). The spare takes its seat: one survivor fewer than min_nodes does not fail the run.
RunRecord evicted_round(const RunRecord& closed, const std::string& reason, const std::string& node_id,
                        const std::string& identity, int64_t until_unix_ms, int64_t now_unix_ms);

/// Members that neither hold their key (`alive`) nor left (`done`): lost.
std::vector<proto::NodeInfo> lost_members(const RunRecord& run, const std::set<std::string>& alive,
                                          const std::set<std::string>& done);

/// What `node_id` learns from a closed round whose workers' store is at `store_addr:store_port`.
proto::Assignment assignment_for(const RunRecord& run, const std::string& node_id, const std::string& store_addr,
                                 int store_port);

/// The run's secret as the run record keeps it in etcd. With a join token it is sealed with it ("sealed:" + the
/// secret XOR an HMAC-SHA256 keystream of the token and run id, hex, + ":" + a tag): whoever can read the run's
/// keys in etcd learns nothing of it without the token. Without a token it is kept as it is: anyone who can
/// write the run's keys can then join the run and be handed the secret anyway, as anyone who reaches a daemon
/// without a token can; etcd's own users and TLS guard it.
std::string seal_secret(const std::string& secret, const std::string& token, const std::string& run_id);
/// The secret `stored` holds. Throws UsageError when it was sealed with another token, or with one while this
/// agent has none (and the reverse): every agent of a run must be given the same MESHRUN_RDZV_TOKEN.
std::string unseal_secret(const std::string& stored, const std::string& token, const std::string& run_id);

/// The join timeout's message: who joined, which requested ranks are missing, the fix.
std::string join_timeout_message(const std::string& run_id, const RunRecord& run,
                                 const std::vector<proto::NodeInfo>& joined, double timeout_s);

}  // namespace meshrun::launcher::etcd

// SlowNodeJudge: the stragglers and slow nodes of an etcd run. No daemon sees every rank there, so node rank 0's agent
// of a closed round judges for all: fed the round's progress keys (r/<round>/p/<node id>, every agent's ranks) at
// each of its heartbeats, it names the stragglers as the daemon does (rendezvous::RunTelemetry) and asks the
// slow-node rule (rendezvous::SlowNodeWatch, proto/rules/slow_node_rule.hpp) whether evicting one pays. What it
// finds is put in r/<round>/judged for every agent's heartbeat reply. Pure: times come in as arguments.
//
// Arrival times are not relayed under etcd (they need one clock across nodes, which the daemon's replies give),
// so only ranks that beat with compute_s (docs/progress.md) or run unsynchronised steps are told apart.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.hpp"
#include "launcher/etcd/run_record.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "proto/rules/slow_node_rule.hpp"
#include "rendezvous/run_telemetry.hpp"
#include "rendezvous/slow_node_watch.hpp"

namespace meshrun::launcher::etcd {

/// One node's progress key as read: its ranks, and the key's mod revision (a new one: fresh figures).
struct NodeProgress {
  std::vector<proto::RankProgress> ranks;
  int64_t revision = 0;
};

/// What every agent of the round learns from the judge (r/<round>/judged).
struct SlowNodeJudgement {
  std::vector<proto::Straggler> stragglers;  // the run's slow ranks now
  std::string note;                          // why a slow node keeps its seat, once per streak ("" when none)
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SlowNodeJudgement, stragglers, note)

/// An eviction the rule decided: the member to evict (its node id), and the decision with its figures.
struct SlowNodeEvictionOrder {
  std::string node_id;
  std::string identity;  // survivor_key: what its cool-down is kept under
  proto::SlowNodeDecision decision;
};

class SlowNodeJudge {
 public:
  /// `closed`: the round judged (its members in group-rank order); `now`: when its workers started.
  SlowNodeJudge(RunRecord closed, double threshold, proto::SlowNodePolicy policy, TimePoint now);

  int64_t round() const { return run_.round; }
  /// The round's progress keys (node id -> its ranks) and the hot spares waiting now (not cooling down), at `now`.
  SlowNodeJudgement judge(const std::map<std::string, NodeProgress>& progress, int spares, TimePoint now);
  /// The eviction the last judge() decided (with --replace-slow-nodes), if any.
  const std::optional<SlowNodeEvictionOrder>& eviction() const { return eviction_; }

 private:
  std::vector<rendezvous::NamedSlowNode> slow_nodes_now(const std::vector<proto::Straggler>& slow) const;
  void weigh(const std::vector<proto::Straggler>& slow, const std::vector<rendezvous::HostedRank>& ranks, int spares,
             TimePoint now);

  RunRecord run_;
  double threshold_;
  proto::SlowNodePolicy policy_;
  rendezvous::RunTelemetry telemetry_;
  rendezvous::SlowNodeWatch watch_;
  std::map<std::string, int64_t> seen_;  // node id -> the progress key's revision last read
  std::optional<TimePoint> weighed_at_;
  std::optional<SlowNodeEvictionOrder> eviction_;
};

}  // namespace meshrun::launcher::etcd

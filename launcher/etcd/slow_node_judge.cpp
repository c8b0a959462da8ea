#include "launcher/etcd/slow_node_judge.hpp"

#include <algorithm>
#include <set>

#include "proto/rendezvous/goodput.hpp"

namespace meshrun::launcher::etcd {
namespace {

// The rule's streaks and medians go by time: once a second is enough (as the daemon judges).
constexpr auto kWeighEvery = std::chrono::seconds(1);

}  // namespace

SlowNodeJudge::SlowNodeJudge(RunRecord closed, double threshold, proto::SlowNodePolicy policy, TimePoint now)
    : run_(std::move(closed)), threshold_(threshold), policy_(policy), telemetry_(now) {
  watch_.round_closed(now);
}

SlowNodeJudgement SlowNodeJudge::judge(const std::map<std::string, NodeProgress>& progress, int spares, TimePoint now) {
  eviction_.reset();
  std::vector<rendezvous::HostedRank> ranks;
  std::set<int> fresh;
  int world_size = 0;
  for (const auto& node : run_.members) {
    world_size += node.local_world_size;
    const auto it = progress.find(node.node_id);
    if (it == progress.end()) continue;
    const bool moved = seen_[node.node_id] != it->second.revision;
    seen_[node.node_id] = it->second.revision;
    for (const auto& p : it->second.ranks) {
      ranks.push_back(rendezvous::HostedRank{node.host, p});
      if (moved) fresh.insert(p.rank);
    }
  }
  telemetry_.progress(ranks, fresh, world_size, threshold_, now);
  SlowNodeJudgement out;
  out.stragglers = telemetry_.stragglers(ranks, threshold_);
  if (policy_.replace) weigh(out.stragglers, ranks, spares, now);
  out.note = watch_.note();
  return out;
}

void SlowNodeJudge::weigh(const std::vector<proto::Straggler>& slow, const std::vector<rendezvous::HostedRank>& ranks,
                          int spares, TimePoint now) {
  if (weighed_at_ && now - *weighed_at_ < kWeighEvery) return;
  weighed_at_ = now;
  rendezvous::SlowNodeContext context{.policy = policy_, .spares = spares};
  for (const auto& r : ranks) {
    context.beats = context.beats || !r.progress.phase.empty();
    context.checkpointing =
        context.checkpointing || proto::phase_kind(r.progress.phase) == proto::PhaseKind::kCheckpoint;
  }
  const proto::SlowNodeDecision decision = watch_.update(slow_nodes_now(slow), context, now);
  if (decision.verdict != proto::SlowNodeVerdict::kEvict) return;
  for (const auto& node : run_.members) {
    if (node.group_rank == decision.node.node_rank) {
      eviction_ = SlowNodeEvictionOrder{node.node_id, survivor_key(node), decision};
    }
  }
}

std::vector<rendezvous::NamedSlowNode> SlowNodeJudge::slow_nodes_now(const std::vector<proto::Straggler>& slow) const {
  std::vector<rendezvous::NamedSlowNode> named;
  int offset = 0;
  for (const auto& node : run_.members) {  // group-rank order: the ranks' offsets (assignment_for)
    double slowdown = 0;
    for (const auto& s : slow) {
      const bool its = s.rank >= offset && s.rank < offset + node.local_world_size;
      if (its && s.median_seconds > 0) slowdown = std::max(slowdown, s.seconds / s.median_seconds);
    }
    offset += node.local_world_size;
    if (slowdown <= 0) continue;
    named.push_back(rendezvous::NamedSlowNode{
        survivor_key(node),
        proto::SlowNode{.node_rank = node.group_rank, .host = node.host, .pid = node.pid, .slowdown = slowdown}});
  }
  return named;
}

}  // namespace meshrun::launcher::etcd

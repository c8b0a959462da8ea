#include "proto/rules/slow_node_rule.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace meshrun::proto {
namespace {

std::string who(const SlowNode& n) { return fmt::format("node {} ({}, pid {})", n.node_rank, n.host, n.pid); }

std::string slow_for(const SlowNode& n) {
  return fmt::format("its ranks ran {:.1f}x slower than the job's median for {:.0f} s", n.slowdown, n.slow_for_s);
}

std::string cost_parts(const SlowNodeDecision& d) {
  const std::string recovery = d.recovery_s >= 0 ? fmt::format("recovery {:.0f} s", d.recovery_s) : "";
  const std::string redo = d.redo_s >= 0 ? fmt::format("{:.0f} s of work since the last checkpoint", d.redo_s)
                                         : "the work since the last save not known: the script does not beat";
  return recovery + ", " + redo;
}

std::string weighed(const SlowNodeDecision& d) {
  return fmt::format("staying loses {:.1f} min of the next {:.0f} min, a restart costs about {:.1f} min ({})",
                     d.loss_s / 60, kSlowNodeHorizonS / 60, d.cost_s / 60, cost_parts(d));
}

}  // namespace

SlowNodeDecision judge_slow_nodes(const SlowNodeFacts& facts) {
  SlowNodeDecision d;
  d.slow_nodes = static_cast<int>(facts.slow.size());
  if (facts.slow.empty()) return d;
  d.node = *std::max_element(facts.slow.begin(), facts.slow.end(),
                             [](const SlowNode& a, const SlowNode& b) { return a.slow_for_s < b.slow_for_s; });
  d.redo_s = facts.redo_s;
  d.recovery_s = facts.recovery_s >= 0 ? facts.recovery_s : kDefaultRecoveryS;
  d.cost_s = d.recovery_s + std::max(0.0, facts.redo_s);
  d.loss_s = d.node.slowdown > 1 ? kSlowNodeHorizonS * (1 - 1 / d.node.slowdown) : 0;
  if (facts.slow.size() > 1) {
    d.verdict = SlowNodeVerdict::kSeveral;
  } else if (d.node.slow_for_s < facts.after_s) {
    d.verdict = SlowNodeVerdict::kTooSoon;
  } else if (facts.spares < 1) {
    d.verdict = SlowNodeVerdict::kNoSpare;
  } else if (facts.checkpointing) {
    d.verdict = SlowNodeVerdict::kCheckpoint;
  } else if (d.loss_s < kSlowNodeMargin * d.cost_s) {
    d.verdict = SlowNodeVerdict::kNotWorth;
  } else {
    d.verdict = SlowNodeVerdict::kEvict;
  }
  return d;
}

std::string SlowNodeDecision::line() const {
  switch (verdict) {
    case SlowNodeVerdict::kNone:
    case SlowNodeVerdict::kTooSoon: return "";
    case SlowNodeVerdict::kSeveral:
      return fmt::format(
          "{} nodes are named slow at once ({} the longest, {:.1f}x): that is the job or the network, not one "
          "node; no node is evicted",
          slow_nodes, who(node), node.slowdown);
    case SlowNodeVerdict::kNoSpare:
      return fmt::format(
          "{}: {}, but no spare waits: it keeps its seat (a spare is one more meshrun with the "
          "same --rdzv-id and --nnodes)",
          who(node), slow_for(node));
    case SlowNodeVerdict::kCheckpoint:
      return fmt::format("{}: {}, but a checkpoint is being written: not evicted during it", who(node), slow_for(node));
    case SlowNodeVerdict::kNotWorth:
      return fmt::format("{}: {}; {}: it keeps its seat", who(node), slow_for(node), weighed(*this));
    case SlowNodeVerdict::kEvict:
      return fmt::format("{} evicted for a spare: {}; {}", who(node), slow_for(node), weighed(*this));
  }
  return "";
}

SlowNodeEviction eviction_record(const SlowNodeDecision& d) {
  SlowNodeEviction e;
  e.node_rank = d.node.node_rank;
  e.host = d.node.host;
  e.pid = d.node.pid;
  e.slowdown = d.node.slowdown;
  e.slow_for_s = d.node.slow_for_s;
  e.loss_s = d.loss_s;
  e.cost_s = d.cost_s;
  e.recovery_s = d.recovery_s;
  e.redo_s = d.redo_s;
  e.line = d.line();
  return e;
}

}  // namespace meshrun::proto

// The rule that decides whether a slow node makes way for a hot spare (--replace-slow-nodes), shared by the
// rendezvous backends: the daemon (rendezvous/slow_node_watch.cpp) feeds it what the straggler filter names and
// what the run's telemetry measured. Pure: no clock, no I/O.
//
//   never    with no spare waiting, while a rank writes a checkpoint, or when more than one node is named slow
//            at once (that is the job or the network, not a node);
//   sustained  the node's ranks named slow without a break for SlowNodePolicy::after_s;
//   pays     over the next kHorizonS, staying loses kHorizonS * (1 - 1/slowdown) seconds of the job's progress;
//            a restart costs the last recovery (kDefaultRecoveryS before the first) plus the work since the last
//            checkpoint (when the script beats: without beats it is not known, and not counted). Evict when the
//            loss is at least kMargin times the cost.
// The slowdown is the node's slowest rank's measure against the run's median: in a synchronous job the whole
// job runs at that rank's pace, so the loss assumes the job is bound by its compute.
#pragma once

#include <string>
#include <vector>

#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::proto {

/// A node whose ranks are named slow now.
struct SlowNode {
  int node_rank = -1;
  std::string host;
  int64_t pid = 0;
  double slowdown = 0;    // its slowest named rank's measure / the run's median
  double slow_for_s = 0;  // named without a break for this long
};

/// What the backend knows when it asks (at a heartbeat of a closed round).
struct SlowNodeFacts {
  std::vector<SlowNode> slow;  // the nodes named slow now
  int spares = 0;              // hot spares waiting (not cooling down)
  bool checkpointing = false;  // some rank's last beat names a checkpoint phase
  double recovery_s = -1;      // the last restart's recovery, fault to first step (-1: no restart yet)
  double redo_s = -1;          // the work since the last checkpoint (-1: not known)
  double after_s = 60;         // SlowNodePolicy::after_s
};

enum class SlowNodeVerdict {
  kNone,        // no node is slow
  kTooSoon,     // a node is slow, not yet for after_s
  kNoSpare,     // ... long enough, but no spare waits
  kCheckpoint,  // ... long enough, but a checkpoint is being written: asked again after it
  kSeveral,     // more than one node is slow: the job or the network, not a node
  kNotWorth,    // the restart would cost more than staying loses
  kEvict,
};

struct SlowNodeDecision {
  SlowNodeVerdict verdict = SlowNodeVerdict::kNone;
  SlowNode node;          // the slow node weighed (the one slow longest)
  double loss_s = 0;      // what staying loses over the horizon
  double cost_s = 0;      // recovery_s + redo_s (redo counted when known)
  double recovery_s = 0;  // the figure used: the last recovery, or the default
  double redo_s = -1;     // as in the facts
  int slow_nodes = 0;     // nodes named slow now
  /// The line to say: the eviction with its figures, or why the node keeps its seat ("" for kNone, kTooSoon).
  std::string line() const;
};

inline constexpr double kSlowNodeHorizonS = 600;
inline constexpr double kSlowNodeMargin = 2;
inline constexpr double kDefaultRecoveryS = 30;

SlowNodeDecision judge_slow_nodes(const SlowNodeFacts& facts);

/// The eviction as status, the page and /metrics show it (round, times since and cool-down left filled by the caller).
SlowNodeEviction eviction_record(const SlowNodeDecision& decision);

}  // namespace meshrun::proto

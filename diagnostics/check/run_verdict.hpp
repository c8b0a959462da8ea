// Judging one rendezvous run from the daemon's status reply: pure functions (no I/O), so every
// verdict (missing ranks, duplicates, stale heartbeats...) can be unit-tested from a crafted reply.
#pragma once

#include <string>
#include <vector>

#include "diagnostics/report/check_report.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::diagnostics {

struct RunExpectation {
  std::string run_id;
  int min_nodes = 1;  // from --nnodes, when given
  int max_nodes = 1;
  bool nnodes_given = false;
};

/// rdzv.run, rdzv.nodes, rdzv.missing_ranks, rdzv.duplicate_ranks, rdzv.heartbeats for the run named
/// in `expect`, judged from `status` (the daemon's reply to status{run_id}).
std::vector<CheckResult> judge_run(const proto::StatusReply& status, const RunExpectation& expect);

/// "host-a (pid 12, node rank 0)" for messages.
std::string describe_node(const proto::NodeInfo& node);

}  // namespace meshrun::diagnostics

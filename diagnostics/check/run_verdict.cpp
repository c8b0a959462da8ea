#include "diagnostics/check/run_verdict.hpp"

#include <cstdio>

#include "common/strings.hpp"

namespace meshrun::diagnostics {
namespace {

std::string expected_text(int min_nodes, int max_nodes) {
  return min_nodes == max_nodes ? std::to_string(min_nodes)
                                : std::to_string(min_nodes) + ":" + std::to_string(max_nodes);
}

}  // namespace

std::string describe_node(const proto::NodeInfo& node) {
  std::string out = node.host.empty() ? node.node_id : node.host;
  out += " (";
  if (!node.addr.empty() && node.addr != node.host) out += node.addr + ", ";
  out += "pid " + std::to_string(node.pid);
  if (node.group_rank >= 0) {
    out += ", node rank " + std::to_string(node.group_rank);
  } else if (node.requested_rank >= 0) {
    out += ", asked for node rank " + std::to_string(node.requested_rank);
  }
  return out + ")";
}

std::vector<CheckResult> judge_run(const proto::StatusReply& status, const RunExpectation& expect) {
  std::vector<CheckResult> out;
  const proto::RunStatus* run = nullptr;
  std::string known;
  for (const auto& r : status.runs) {
    if (r.run_id == expect.run_id) run = &r;
    known += (known.empty() ? "" : ", ") + r.run_id;
  }
  if (run == nullptr) {
    auto r = make_result(
        CheckStatus::kFail, "rdzv.run",
        "the daemon has no run '" + expect.run_id + "' (" +
            (known.empty() ? std::string("it has no runs") : "its runs: " + known) + ")",
        "no node has joined yet, or the nodes use a different --rdzv-id: start them with --rdzv-id " + expect.run_id);
    r.data = {{"run_id", expect.run_id}, {"found", false}};
    out.push_back(std::move(r));
    return out;
  }
  const nlohmann::json run_json = *run;

  // rdzv.run: the run's state and last event.
  {
    CheckResult r;
    const std::string what = "run '" + run->run_id + "' round " + std::to_string(run->round) + " is " +
                             std::string(proto::to_string(run->state)) +
                             (run->last_event.empty() ? "" : "; last event: " + run->last_event);
    if (run->state == proto::RunState::kFailed) {
      r = make_result(CheckStatus::kFail, "rdzv.run", what, "fix the cause above, then restart every node of the run");
    } else {
      r = make_result(CheckStatus::kPass, "rdzv.run", what);
    }
    r.data = {{"run_id", run->run_id}, {"found", true}, {"status", run_json}};
    out.push_back(std::move(r));
  }

  // rdzv.nodes: joined vs expected.
  {
    std::string names;
    for (const auto& n : run->nodes) names += (names.empty() ? "" : ", ") + describe_node(n);
    const int joined = static_cast<int>(run->nodes.size());
    const std::string expected = expected_text(run->min_nodes, run->max_nodes);
    std::string detail =
        std::to_string(joined) + " of " + expected + " node(s) joined" + (names.empty() ? "" : ": " + names);
    if (!run->waiting.empty()) detail += "; " + std::to_string(run->waiting.size()) + " waiting for the next round";
    CheckResult r;
    if (run->state == proto::RunState::kOpen && joined < run->min_nodes) {
      r = make_result(CheckStatus::kFail, "rdzv.nodes", detail,
                      "start the remaining " + std::to_string(run->min_nodes - joined) +
                          " node(s) with the same --rdzv-endpoint and --rdzv-id");
    } else if (expect.nnodes_given && (expect.min_nodes != run->min_nodes || expect.max_nodes != run->max_nodes)) {
      r = make_result(CheckStatus::kWarn, "rdzv.nodes",
                      detail + "; the run expects --nnodes " + expected + " but this check was told " +
                          expected_text(expect.min_nodes, expect.max_nodes),
                      "every node of a run must use the same --nnodes");
    } else {
      r = make_result(CheckStatus::kPass, "rdzv.nodes", detail);
    }
    r.data = {{"joined", joined},
              {"waiting", run->waiting.size()},
              {"min_nodes", run->min_nodes},
              {"max_nodes", run->max_nodes},
              {"nodes", run_json["nodes"]}};
    out.push_back(std::move(r));
  }

  // rdzv.missing_ranks
  {
    CheckResult r;
    if (run->missing_ranks.empty()) {
      r = make_result(CheckStatus::kPass, "rdzv.missing_ranks", "no node rank is missing");
    } else {
      r = make_result(CheckStatus::kFail, "rdzv.missing_ranks",
                      "node rank(s) " + join(run->missing_ranks) + " have not joined",
                      "start the node(s) meant for rank(s) " + join(run->missing_ranks) +
                          " (--node-rank), or check why they cannot reach the endpoint (run `meshrun check` there)");
    }
    r.data = {{"missing_ranks", run->missing_ranks}};
    out.push_back(std::move(r));
  }

  // rdzv.duplicate_ranks
  {
    CheckResult r;
    if (run->duplicate_ranks.empty()) {
      r = make_result(CheckStatus::kPass, "rdzv.duplicate_ranks", "no node rank was requested twice");
    } else {
      std::string list;
      for (const auto& d : run->duplicate_ranks) list += (list.empty() ? "" : "; ") + d;
      r = make_result(CheckStatus::kFail, "rdzv.duplicate_ranks", "node rank requested by two nodes: " + list,
                      "give every node its own --node-rank (or leave it out and let the daemon assign ranks)");
    }
    r.data = {{"duplicate_ranks", run->duplicate_ranks}};
    out.push_back(std::move(r));
  }

  // rdzv.heartbeats
  {
    std::string stale;
    nlohmann::json stale_json = nlohmann::json::array();
    int total = 0;
    for (const auto* list : {&run->nodes, &run->waiting}) {
      for (const auto& n : *list) {
        ++total;
        if (n.alive) continue;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%.1f", n.since_heartbeat_s);
        stale += (stale.empty() ? "" : "; ") + describe_node(n) + " silent for " + secs + " s";
        stale_json.push_back(
            {{"node_id", n.node_id}, {"host", n.host}, {"pid", n.pid}, {"since_heartbeat_s", n.since_heartbeat_s}});
      }
    }
    CheckResult r;
    if (stale.empty()) {
      r = make_result(CheckStatus::kPass, "rdzv.heartbeats",
                      "all " + std::to_string(total) + " node(s) heard from within their keep-alive timeout");
    } else {
      r = make_result(CheckStatus::kFail, "rdzv.heartbeats", "stale node(s): " + stale,
                      "that agent is stopped, hung or cut off from the daemon: check the process (kill -CONT? "
                      "out of memory?) and its network");
    }
    r.data = {{"stale", stale_json}, {"nodes", total}};
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace meshrun::diagnostics

#include "diagnostics/check/run_verdict.hpp"

#include <cstdio>

#include "common/strings.hpp"

namespace meshrun::diagnostics {
namespace {

std::string expected_text(int min_nodes, int max_nodes) {
  return min_nodes == max_nodes ? std::to_string(min_nodes)
                                : std::to_string(min_nodes) + ":" + std::to_string(max_nodes);
}

// The run named `run_id` in the reply (the last one, should the daemon list it twice); nullptr if none.
const proto::RunStatus* find_run(const proto::StatusReply& status, const std::string& run_id) {
  const proto::RunStatus* run = nullptr;
  for (const auto& r : status.runs) {
    if (r.run_id == run_id) run = &r;
  }
  return run;
}

// rdzv.run when the daemon does not know the run: name the runs it does know.
CheckResult unknown_run_result(const proto::StatusReply& status, const std::string& run_id) {
  std::string known;
  for (const auto& listed : status.runs) known += (known.empty() ? "" : ", ") + listed.run_id;
  auto r = make_result(
      CheckStatus::kFail, "rdzv.run",
      "the daemon has no run '" + run_id + "' (" +
          (known.empty() ? std::string("it has no runs") : "its runs: " + known) + ")",
      "no node has joined yet, or the nodes use a different --rdzv-id: start them with --rdzv-id " + run_id);
  r.data = {{"run_id", run_id}, {"found", false}};
  return r;
}

// rdzv.run: the run's state and last event.
CheckResult run_result(const proto::RunStatus& run, const nlohmann::json& run_json) {
  const std::string what = "run '" + run.run_id + "' round " + std::to_string(run.round) + " is " +
                           std::string(proto::to_string(run.state)) +
                           (run.last_event.empty() ? "" : "; last event: " + run.last_event);
  CheckResult r;
  if (run.state == proto::RunState::kFailed) {
    r = make_result(CheckStatus::kFail, "rdzv.run", what, "fix the cause above, then restart every node of the run");
  } else {
    r = make_result(CheckStatus::kPass, "rdzv.run", what);
  }
  r.data = {{"run_id", run.run_id}, {"found", true}, {"status", run_json}};
  return r;
}

// "2 of 2:4 node(s) joined: host-a (...), host-b (...); 1 waiting for the next round"
std::string joined_text(const proto::RunStatus& run) {
  std::string names;
  for (const auto& n : run.nodes) names += (names.empty() ? "" : ", ") + describe_node(n);
  std::string detail = std::to_string(run.nodes.size()) + " of " + expected_text(run.min_nodes, run.max_nodes) +
                       " node(s) joined" + (names.empty() ? "" : ": " + names);
  if (!run.waiting.empty()) detail += "; " + std::to_string(run.waiting.size()) + " waiting for the next round";
  return detail;
}

// rdzv.nodes: joined vs expected, and whether this check was told the run's own --nnodes.
CheckResult nodes_result(const proto::RunStatus& run, const nlohmann::json& nodes_json, const RunExpectation& expect) {
  const int joined = static_cast<int>(run.nodes.size());
  const std::string expected = expected_text(run.min_nodes, run.max_nodes);
  const std::string detail = joined_text(run);
  CheckResult r;
  if (run.state == proto::RunState::kOpen && joined < run.min_nodes) {
    r = make_result(CheckStatus::kFail, "rdzv.nodes", detail,
                    "start the remaining " + std::to_string(run.min_nodes - joined) +
                        " node(s) with the same --rdzv-endpoint and --rdzv-id");
  } else if (expect.nnodes_given && (expect.min_nodes != run.min_nodes || expect.max_nodes != run.max_nodes)) {
    r = make_result(CheckStatus::kWarn, "rdzv.nodes",
                    detail + "; the run expects --nnodes " + expected + " but this check was told " +
                        expected_text(expect.min_nodes, expect.max_nodes),
                    "every node of a run must use the same --nnodes");
  } else {
    r = make_result(CheckStatus::kPass, "rdzv.nodes", detail);
  }
  r.data = {{"joined", joined},
            {"waiting", run.waiting.size()},
            {"min_nodes", run.min_nodes},
            {"max_nodes", run.max_nodes},
            {"nodes", nodes_json}};
  return r;
}

// rdzv.missing_ranks
CheckResult missing_ranks_result(const proto::RunStatus& run) {
  CheckResult r;
  if (run.missing_ranks.empty()) {
    r = make_result(CheckStatus::kPass, "rdzv.missing_ranks", "no node rank is missing");
  } else {
    r = make_result(CheckStatus::kFail, "rdzv.missing_ranks",
                    "node rank(s) " + join(run.missing_ranks) + " have not joined",
                    "start the node(s) meant for rank(s) " + join(run.missing_ranks) +
                        " (--node-rank), or check why they cannot reach the endpoint (run `meshrun check` there)");
  }
  r.data = {{"missing_ranks", run.missing_ranks}};
  return r;
}

// rdzv.duplicate_ranks
CheckResult duplicate_ranks_result(const proto::RunStatus& run) {
  CheckResult r;
  if (run.duplicate_ranks.empty()) {
    r = make_result(CheckStatus::kPass, "rdzv.duplicate_ranks", "no node rank was requested twice");
  } else {
    r = make_result(CheckStatus::kFail, "rdzv.duplicate_ranks",
                    "node rank requested by two nodes: " + join(run.duplicate_ranks, "; "),
                    "give every node its own --node-rank (or leave it out and let the daemon assign ranks)");
  }
  r.data = {{"duplicate_ranks", run.duplicate_ranks}};
  return r;
}

// Nodes, joined or waiting, whose agent has not sent a heartbeat within its keep-alive timeout.
struct StaleNodes {
  std::string text;                               // "host-a (pid 12) silent for 31.0 s; ..."; empty: none
  nlohmann::json json = nlohmann::json::array();  // one object per stale node
  int total = 0;                                  // nodes looked at
};

StaleNodes find_stale_nodes(const proto::RunStatus& run) {
  StaleNodes stale;
  for (const auto* list : {&run.nodes, &run.waiting}) {
    for (const auto& n : *list) {
      ++stale.total;
      if (n.alive) continue;
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", n.since_heartbeat_s);
      stale.text += (stale.text.empty() ? "" : "; ") + describe_node(n) + " silent for " + secs + " s";
      stale.json.push_back(
          {{"node_id", n.node_id}, {"host", n.host}, {"pid", n.pid}, {"since_heartbeat_s", n.since_heartbeat_s}});
    }
  }
  return stale;
}

// rdzv.heartbeats
CheckResult heartbeats_result(const proto::RunStatus& run) {
  const StaleNodes stale = find_stale_nodes(run);
  CheckResult r;
  if (stale.text.empty()) {
    r = make_result(CheckStatus::kPass, "rdzv.heartbeats",
                    "all " + std::to_string(stale.total) + " node(s) heard from within their keep-alive timeout");
  } else {
    r = make_result(CheckStatus::kFail, "rdzv.heartbeats", "stale node(s): " + stale.text,
                    "that agent is stopped, hung or cut off from the daemon: check the process (kill -CONT? "
                    "out of memory?) and its network");
  }
  r.data = {{"stale", stale.json}, {"nodes", stale.total}};
  return r;
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
  const proto::RunStatus* run = find_run(status, expect.run_id);
  if (run == nullptr) {
    out.push_back(unknown_run_result(status, expect.run_id));
    return out;
  }
  const nlohmann::json run_json = *run;
  out.push_back(run_result(*run, run_json));
  out.push_back(nodes_result(*run, run_json["nodes"], expect));
  out.push_back(missing_ranks_result(*run));
  out.push_back(duplicate_ranks_result(*run));
  out.push_back(heartbeats_result(*run));
  return out;
}

}  // namespace meshrun::diagnostics

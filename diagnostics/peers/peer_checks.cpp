#include "diagnostics/peers/peer_checks.hpp"

#include <cstdio>

namespace meshrun::diagnostics {
namespace {

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string label_of(const PeerSessionOutcome& o, int index) {
  for (const auto& n : o.nodes) {
    if (n.index == index) return node_label(n);
  }
  return node_label(PeerNode{index, "?", ""});
}

CheckResult peers_result(const PeerSessionOutcome& o, const PeerSessionOptions& options) {
  std::string who;
  for (const auto& n : o.nodes) who += (who.empty() ? "" : ", ") + node_label(n) + " " + n.addr;
  CheckResult r;
  if (o.missing.empty()) {
    r = make_result(CheckStatus::kPass, "bandwidth.peers",
                    std::to_string(o.nodes.size()) + " of " + std::to_string(o.peers) + " instances in session '" +
                        options.session + "' (this is #" + std::to_string(o.index) + "): " + who);
  } else {
    std::string never;
    std::string late;
    for (int i : o.missing) {
      auto& list = i < o.joined ? late : never;
      list += (list.empty() ? "#" : ", #") + std::to_string(i);
    }
    std::string detail = std::string("only ") + std::to_string(o.nodes.size()) + " of " + std::to_string(o.peers) +
                         " instances took part in session '" + options.session + "' (#0 waited " +
                         fixed(to_seconds(options.join_timeout), 1) + " s):";
    if (!never.empty()) detail += " " + never + " never joined;";
    if (!late.empty()) detail += " " + late + " joined after the start;";
    detail += " present: " + who;
    r = make_result(CheckStatus::kFail, "bandwidth.peers", detail,
                    "the missing node is the one not listed as present: start `meshrun check --bandwidth --peers " +
                        std::to_string(o.peers) +
                        "` on it, with the same --rdzv-endpoint and --rdzv-id, within "
                        "--peers-timeout of the first instance (and a new --rdzv-id for each attempt)");
  }
  r.data = {{"session", options.session},
            {"index", o.index},
            {"peers", o.peers},
            {"joined", o.joined},
            {"missing", o.missing}};
  return r;
}

CheckResult pairs_result(const PeerSessionOutcome& o) {
  int ok = 0;
  std::vector<std::string> failures;
  const PairResult* slowest = nullptr;
  bool slowest_a_to_b = true;
  const PairResult* fastest = nullptr;
  bool fastest_a_to_b = true;
  double rtt_sum = 0;
  const PairResult* worst_rtt = nullptr;
  for (const auto& p : o.pairs) {
    if (!p.ok) {
      failures.push_back(label_of(o, p.a) + " <-> " + label_of(o, p.b) + ": " + p.error);
      continue;
    }
    ++ok;
    rtt_sum += p.rtt_avg_us;
    if (worst_rtt == nullptr || p.rtt_avg_us > worst_rtt->rtt_avg_us) worst_rtt = &p;
    for (const bool a_to_b : {true, false}) {
      const double v = a_to_b ? p.a_to_b_gbps : p.b_to_a_gbps;
      if (slowest == nullptr || v < (slowest_a_to_b ? slowest->a_to_b_gbps : slowest->b_to_a_gbps)) {
        slowest = &p;
        slowest_a_to_b = a_to_b;
      }
      if (fastest == nullptr || v > (fastest_a_to_b ? fastest->a_to_b_gbps : fastest->b_to_a_gbps)) {
        fastest = &p;
        fastest_a_to_b = a_to_b;
      }
    }
  }
  const auto direction = [&](const PairResult& p, bool a_to_b) {
    const double v = a_to_b ? p.a_to_b_gbps : p.b_to_a_gbps;
    return fixed(v, 3) + " GB/s (" + label_of(o, a_to_b ? p.a : p.b) + " -> " + label_of(o, a_to_b ? p.b : p.a) + ")";
  };
  const std::string scope = o.complete_view ? "" : "this node's pairs: ";
  std::string detail = scope + std::to_string(ok) + " of " + std::to_string(o.pairs.size()) + " pair(s) measured in " +
                       std::to_string(o.rounds) + " round(s)";
  if (ok > 0) {
    detail += "; slowest " + direction(*slowest, slowest_a_to_b) + ", fastest " + direction(*fastest, fastest_a_to_b) +
              "; round trip avg " + fixed(rtt_sum / ok, 1) + " us, worst " + fixed(worst_rtt->rtt_avg_us, 1) + " us (" +
              label_of(o, worst_rtt->a) + " <-> " + label_of(o, worst_rtt->b) + ")";
  }
  for (const auto& f : failures) detail += "; FAILED " + f;
  for (const auto& u : o.unreported) detail += "; " + u + " never reported its results";
  for (const auto& l : o.lost) detail += "; " + l;
  if (!o.complete_view) detail += " (the full matrix is printed by #0)";

  const bool failed = !failures.empty() || !o.unreported.empty();
  CheckResult r =
      make_result(failed ? CheckStatus::kFail : CheckStatus::kPass, "bandwidth.pairs", detail,
                  failed ? "nodes must reach each other directly, not only the daemon (NCCL and Gloo connect "
                           "node to node on ephemeral ports): open those ports between the nodes, check "
                           "routes with `meshrun check` on each, and see the reason given per pair"
                         : "");
  r.data = matrix_json(o.nodes, o.pairs);
  r.data["complete"] = o.complete_view;
  r.data["rounds"] = o.rounds;
  r.data["lost"] = o.lost;
  r.data["unreported"] = o.unreported;
  // Only #0 knows every pair; elsewhere a matrix would be mostly unknown cells.
  if (o.complete_view) r.table = format_matrix(o.nodes, o.pairs, 4);
  return r;
}

}  // namespace

std::vector<CheckResult> judge_peer_session(const PeerSessionOutcome& outcome, const PeerSessionOptions& options) {
  std::vector<CheckResult> out;
  out.push_back(peers_result(outcome, options));
  out.push_back(pairs_result(outcome));
  return out;
}

}  // namespace meshrun::diagnostics

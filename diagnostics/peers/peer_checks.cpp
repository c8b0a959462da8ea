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

// One direction of one measured pair.
struct Direction {
  const PairResult* pair = nullptr;
  bool a_to_b = true;

  double gbps() const { return a_to_b ? pair->a_to_b_gbps : pair->b_to_a_gbps; }
};

// What the measured pairs add up to, for the bandwidth.pairs line.
struct PairSummary {
  int ok = 0;                         // pairs measured
  std::vector<std::string> failures;  // "<a> <-> <b>: <error>" per failed pair
  Direction slowest;                  // over both directions of every measured pair
  Direction fastest;
  double rtt_sum = 0;  // of the pairs' average round trips
  const PairResult* worst_rtt = nullptr;
};

PairSummary summarize_pairs(const PeerSessionOutcome& o) {
  PairSummary s;
  for (const auto& p : o.pairs) {
    if (!p.ok) {
      s.failures.push_back(label_of(o, p.a) + " <-> " + label_of(o, p.b) + ": " + p.error);
      continue;
    }
    ++s.ok;
    s.rtt_sum += p.rtt_avg_us;
    if (s.worst_rtt == nullptr || p.rtt_avg_us > s.worst_rtt->rtt_avg_us) s.worst_rtt = &p;
    for (const bool a_to_b : {true, false}) {
      const Direction d{&p, a_to_b};
      if (s.slowest.pair == nullptr || d.gbps() < s.slowest.gbps()) s.slowest = d;
      if (s.fastest.pair == nullptr || d.gbps() > s.fastest.gbps()) s.fastest = d;
    }
  }
  return s;
}

// "1.234 GB/s (host-a #0 -> host-b #1)"
std::string direction_text(const PeerSessionOutcome& o, const Direction& d) {
  const PairResult& p = *d.pair;
  return fixed(d.gbps(), 3) + " GB/s (" + label_of(o, d.a_to_b ? p.a : p.b) + " -> " +
         label_of(o, d.a_to_b ? p.b : p.a) + ")";
}

std::string pairs_detail(const PeerSessionOutcome& o, const PairSummary& s) {
  const std::string scope = o.complete_view ? "" : "this node's pairs: ";
  std::string detail = scope + std::to_string(s.ok) + " of " + std::to_string(o.pairs.size()) +
                       " pair(s) measured in " + std::to_string(o.rounds) + " round(s)";
  if (s.ok > 0) {
    detail += "; slowest " + direction_text(o, s.slowest) + ", fastest " + direction_text(o, s.fastest) +
              "; round trip avg " + fixed(s.rtt_sum / s.ok, 1) + " us, worst " + fixed(s.worst_rtt->rtt_avg_us, 1) +
              " us (" + label_of(o, s.worst_rtt->a) + " <-> " + label_of(o, s.worst_rtt->b) + ")";
  }
  for (const auto& f : s.failures) detail += "; FAILED " + f;
  for (const auto& u : o.unreported) detail += "; " + u + " never reported its results";
  for (const auto& l : o.lost) detail += "; " + l;
  if (!o.complete_view) detail += " (the full matrix is printed by #0)";
  return detail;
}

CheckResult pairs_result(const PeerSessionOutcome& o) {
  const PairSummary summary = summarize_pairs(o);
  const bool failed = !summary.failures.empty() || !o.unreported.empty();
  CheckResult r =
      make_result(failed ? CheckStatus::kFail : CheckStatus::kPass, "bandwidth.pairs", pairs_detail(o, summary),
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

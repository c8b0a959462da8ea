#include "rendezvous/status_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace meshrun::rendezvous {
namespace {

std::string join_ints(const std::vector<int>& v) { return v.empty() ? "-" : fmt::format("{}", fmt::join(v, ",")); }

void print_nodes(const std::vector<proto::NodeInfo>& nodes, std::ostream& out) {
  out << fmt::format("    {:<6} {:<24} {:<18} {:>7} {:>8} {:>10} {:>10}  {}\n", "rank", "host", "addr", "workers",
                     "pid", "heartbeat", "clock", "state");
  for (const auto& n : nodes) {
    // The node's clock minus the daemon's, as its agent measured it ("-": not yet, or an older agent).
    const std::string clock = n.clock.measured ? fmt::format("{:+.3f}s", n.clock.offset_s) : "-";
    const std::string state = !n.alive ? "DEAD"
                              : n.cooldown_s > 0
                                  ? fmt::format("evicted as slow, {:.0f} s of cool-down left", n.cooldown_s)
                                  : "alive";
    out << fmt::format("    {:<6} {:<24} {:<18} {:>7} {:>8} {:>9.1f}s {:>10}  {}\n",
                       n.group_rank >= 0 ? std::to_string(n.group_rank) : "-", n.host, n.addr, n.local_world_size,
                       n.pid, n.since_heartbeat_s, clock, state);
  }
}

// Per-rank progress (from the workers' beats and collectives, docs/progress.md); nothing without either.
void print_ranks(const std::vector<proto::NodeInfo>& nodes, std::ostream& out) {
  bool header = false;
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      if (!header) {
        out << fmt::format("    {:<6} {:<24} {:>8} {:<10} {:>9} {:>9} {:>9} {:>10}  {}\n", "rank", "host", "step",
                           "phase", "step s", "compute s", "beat age", "loss", "flags");
        header = true;
      }
      std::string flags = r.hung ? "HUNG" : "";
      if (r.late) flags += flags.empty() ? "LATE" : ",LATE";
      if (r.straggler) flags += flags.empty() ? "STRAGGLER" : ",STRAGGLER";
      if (r.phase.empty()) {  // no beats: what its collectives say
        out << fmt::format("    {:<6} {:<24} {:>8} {:<10} {:>9} {:>9} {:>9} {:>10}  {}{}\n", r.rank, n.host, "-",
                           "(no beats)", "-", "-", "-", "-", flags,
                           r.arrival_compute_s > 0 ? fmt::format("{}{:.1f} ms between collectives",
                                                                 flags.empty() ? "" : "; ", r.arrival_compute_s * 1e3)
                                                   : "");
        continue;
      }
      out << fmt::format("    {:<6} {:<24} {:>8} {:<10} {:>9.3f} {:>9.3f} {:>8.1f}s {:>10.4f}  {}\n", r.rank, n.host,
                         r.step, r.phase, r.step_time_s, r.compute_s, r.since_beat_s, r.loss, flags);
    }
  }
}

// "restarts: 2 (hung 1, node_lost 1); last: round 2, hung, 3.2 s ago: <reason>"; nothing before any restart.
void print_restarts(const proto::RunStatus& run, std::ostream& out) {
  if (run.restarts_by_cause.empty()) return;
  int64_t total = 0;
  std::vector<std::string> counts;
  for (const auto& [cause, n] : run.restarts_by_cause) {
    total += n;
    counts.push_back(fmt::format("{} {}", cause, n));
  }
  out << fmt::format("  restarts: {} ({})", total, fmt::join(counts, ", "));
  if (!run.restarts.empty()) {
    const auto& last = run.restarts.back();
    out << fmt::format("; last: round {}, {}, {:.1f} s ago: {}", last.round, proto::to_string(last.cause), last.since_s,
                       last.reason);
    if (!last.replaced.empty()) out << fmt::format("\n  spare: {}", last.replaced);
    out << fmt::format("\n  recovery: {}", proto::describe(last.recovery));
  }
  out << "\n";
}

// --replace-slow-nodes: "slow nodes evicted: 1; last: round 0, 2.0 min ago: node 1 (...) evicted for a spare: ..."
// and why a slow node keeps its seat now; nothing when no node was ever slow.
void print_slow_nodes(const proto::RunStatus& run, std::ostream& out) {
  if (!run.evictions.empty()) {
    const auto& last = run.evictions.back();
    out << fmt::format("  slow nodes evicted: {}; last: round {}, {:.0f} s ago: {}", run.slow_node_evictions,
                       last.round, last.since_s, last.line);
    if (last.cooldown_s > 0) out << fmt::format(" (cool-down: {:.0f} s left)", last.cooldown_s);
    out << "\n";
  }
  if (!run.slow_nodes.empty()) out << "  slow node kept: " << run.slow_nodes << "\n";
}

// "root cause: rank 3 on node-b (round 0): exit code 1: RuntimeError: boom; then 2 more failure(s)".
void print_failures(const proto::RunStatus& run, std::ostream& out) {
  if (run.failures.empty()) return;
  const auto& first = run.failures.front();
  out << fmt::format("  root cause: rank {} on {} (round {}): {}{}", first.rank, first.host, first.round, first.exit,
                     first.error.empty() ? "" : ": " + first.error);
  if (run.failures.size() > 1) out << fmt::format("; then {} more failure(s)", run.failures.size() - 1);
  out << "\n";
}

// "arrival probes: 14 counted, 2 imprecise (clock offsets), 0 partial (recorder ring), 0 abandoned (unanswered)":
// only once a probe was
// not counted, since then a rank's arrival figure moves more slowly than every 2 s.
void print_arrival_probes(const proto::RunStatus& run, std::ostream& out) {
  const auto& t = run.arrival_probes;
  if (t.imprecise + t.partial + t.abandoned == 0) return;
  out << fmt::format(
      "  arrival probes: {} counted, {} imprecise (clock offsets), {} partial (recorder ring), {} abandoned "
      "(unanswered)\n",
      t.counted, t.imprecise, t.partial, t.abandoned);
}

}  // namespace

void print_status_table(const proto::StatusReply& s, std::ostream& out) {
  out << fmt::format("{} {}: up {:.0f} s, {} connection(s), {} key(s) in the shared store\n", s.server, s.version,
                     s.uptime_s, s.connections, s.keys);
  if (s.runs.empty()) {
    out << "no runs\n";
    return;
  }
  for (const auto& run : s.runs) {
    out << fmt::format("run '{}': round {}, {}, nodes {}:{}, store port {}, {} key(s)\n", run.run_id, run.round,
                       proto::to_string(run.state), run.min_nodes, run.max_nodes, run.master_port, run.keys);
    print_nodes(run.nodes, out);
    print_ranks(run.nodes, out);
    if (!run.waiting.empty()) {
      out << (run.spares > 0 ? "  hot spares (each takes the node rank of a node lost):\n"
                             : "  waiting for the next round:\n");
      print_nodes(run.waiting, out);
    }
    out << "  missing node ranks: " << join_ints(run.missing_ranks) << "\n";
    for (const auto& dup : run.duplicate_ranks) out << "  DUPLICATE " << dup << "\n";
    out << "  last event: " << run.last_event << "\n";
    print_restarts(run, out);
    print_slow_nodes(run, out);
    print_failures(run, out);
    print_arrival_probes(run, out);
    if (run.goodput.wall_s > 0) out << "  " << proto::describe(run.goodput) << "\n";
  }
}

}  // namespace meshrun::rendezvous

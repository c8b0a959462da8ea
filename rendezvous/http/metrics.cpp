#include "rendezvous/http/metrics.hpp"

#include <cmath>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace meshrun::rendezvous::http {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Builds one family at a time: the HELP and TYPE lines once, then its samples.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    name_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const Labels& labels, double value) {
    out_ += name_;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        out_ += fmt::format("{}{}=\"{}\"", i ? "," : "", labels[i].first, escape_label_value(labels[i].second));
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  static std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", v);
  }
  std::string name_;
  std::string out_;
};

void daemon_families(Exposition& e, const LiveSnapshot& s, size_t http_connections) {
  e.family("meshrun_rendezvous_up", "gauge", "1 while the daemon answers (this page was rendered by it)");
  e.sample({}, 1);
  e.family("meshrun_rendezvous_info", "gauge", "The daemon's version, as a label");
  e.sample({{"version", s.status.version}}, 1);
  e.family("meshrun_rendezvous_uptime_seconds", "gauge", "Seconds since the daemon started");
  e.sample({}, s.status.uptime_s);
  e.family("meshrun_rendezvous_io_lag_seconds", "gauge", "Worst lateness of the io loop over the last 10 s");
  e.sample({}, s.io_lag_s);
  e.family("meshrun_store_connections", "gauge", "Open store and rendezvous connections");
  e.sample({}, s.status.connections);
  e.family("meshrun_store_keys", "gauge", "Keys in the shared (main port) store");
  e.sample({}, static_cast<double>(s.status.keys));
  e.family("meshrun_http_connections", "gauge", "Open HTTP connections");
  e.sample({}, static_cast<double>(http_connections));
  e.family("meshrun_runs", "gauge", "Runs the daemon knows");
  e.sample({}, static_cast<double>(s.status.runs.size()));
}

// One family with one sample per run.
void per_run(Exposition& e, const LiveSnapshot& s, std::string_view name, std::string_view type, std::string_view help,
             const std::function<void(Exposition&, const proto::RunStatus&)>& samples) {
  if (s.status.runs.empty()) return;
  e.family(name, type, help);
  for (const auto& run : s.status.runs) samples(e, run);
}

void run_families(Exposition& e, const LiveSnapshot& s) {
  per_run(e, s, "meshrun_run_round", "gauge", "The run's rendezvous round (restarts so far, scale-ups included)",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, static_cast<double>(r.round));
          });
  per_run(e, s, "meshrun_run_state", "gauge", "1 for the run's state (open, closed, failed)",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}, {"state", std::string(proto::to_string(r.state))}}, 1);
          });
  per_run(e, s, "meshrun_run_keys", "gauge", "Keys in the run's private store",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, static_cast<double>(r.keys));
          });
  per_run(e, s, "meshrun_nodes", "gauge", "The run's nodes: alive and dead participants, and those waiting",
          [](Exposition& x, const proto::RunStatus& r) {
            int alive = 0;
            for (const auto& n : r.nodes) alive += n.alive ? 1 : 0;
            x.sample({{"run", r.run_id}, {"state", "alive"}}, alive);
            x.sample({{"run", r.run_id}, {"state", "dead"}}, static_cast<double>(r.nodes.size()) - alive);
            x.sample({{"run", r.run_id}, {"state", "waiting"}}, static_cast<double>(r.waiting.size()));
          });
  per_run(e, s, "meshrun_spare_nodes", "gauge", "Nodes waiting as hot spares (the round has its maximum)",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, r.spares);
          });
}

// --replace-slow-nodes: the evictions, and the last one's figures (what the rule weighed).
void slow_node_families(Exposition& e, const LiveSnapshot& s) {
  per_run(e, s, "meshrun_slow_node_evictions_total", "counter",
          "Nodes evicted as slow for a spare (--replace-slow-nodes)", [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, static_cast<double>(r.slow_node_evictions));
          });
  const auto last = [](const proto::RunStatus& r) { return r.evictions.empty() ? nullptr : &r.evictions.back(); };
  per_run(e, s, "meshrun_slow_node_eviction_slowdown", "gauge",
          "The last evicted node's slowest rank against the run's median",
          [&last](Exposition& x, const proto::RunStatus& r) {
            if (const auto* ev = last(r)) x.sample({{"run", r.run_id}, {"host", ev->host}}, ev->slowdown);
          });
  per_run(e, s, "meshrun_slow_node_eviction_seconds", "gauge",
          "The last eviction's figures: what staying would lose over the horizon, the restart's estimated cost",
          [&last](Exposition& x, const proto::RunStatus& r) {
            if (const auto* ev = last(r)) {
              x.sample({{"run", r.run_id}, {"figure", "loss"}}, ev->loss_s);
              x.sample({{"run", r.run_id}, {"figure", "cost"}}, ev->cost_s);
              x.sample({{"run", r.run_id}, {"figure", "slow_for"}}, ev->slow_for_s);
            }
          });
}

// What the run's restarts cost: the latest recovery by phase, the goodput ledger, restarts and hangs by cause.
void recovery_families(Exposition& e, const LiveSnapshot& s) {
  per_run(e, s, "meshrun_recovery_seconds", "gauge",
          "The latest restart's recovery, by phase (fault to first step; only phases reached)",
          [](Exposition& x, const proto::RunStatus& r) {
            if (r.restarts.empty()) return;
            const auto& l = r.restarts.back().recovery;
            const std::pair<const char*, double> phases[] = {
                {"detect", l.detect_s}, {"stop", l.stop_s}, {"rendezvous", l.rendezvous_s}, {"start", l.start_s},
                {"init", l.init_s},     {"load", l.load_s}, {"first_step", l.first_step_s}, {"total", l.total_s}};
            for (const auto& [phase, seconds] : phases) {
              if (seconds >= 0) x.sample({{"run", r.run_id}, {"phase", phase}}, seconds);
            }
          });
  per_run(e, s, "meshrun_goodput_ratio", "gauge",
          "Productive training (step intervals of new steps) over the run's wall time so far",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, r.goodput.ratio);
          });
  per_run(e, s, "meshrun_productive_seconds", "gauge", "Seconds of productive training (step intervals of new steps)",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, r.goodput.productive_s);
          });
  per_run(e, s, "meshrun_badput_seconds", "gauge",
          "The run's wall time that was not productive training, by cause (docs/daemon.md#the-goodput-ledger)",
          [](Exposition& x, const proto::RunStatus& r) {
            const auto& g = r.goodput;
            const std::pair<const char*, double> causes[] = {
                {"startup", g.startup_s},     {"checkpoint", g.checkpoint_s}, {"other_phases", g.other_phases_s},
                {"hang_wait", g.hang_wait_s}, {"restart", g.restarts_s},      {"work_lost", g.work_lost_s},
                {"shutdown", g.shutdown_s},   {"untold", g.untold_s},         {"in_progress", g.in_progress_s},
                {"stall", g.stall_s}};
            for (const auto& [cause, seconds] : causes) x.sample({{"run", r.run_id}, {"cause", cause}}, seconds);
          });
  per_run(e, s, "meshrun_spare_idle_node_seconds", "counter", "Node-seconds hot spares spent waiting",
          [](Exposition& x, const proto::RunStatus& r) {
            x.sample({{"run", r.run_id}}, r.goodput.spare_node_s);
          });
  per_run(e, s, "meshrun_restarts_total", "counter", "Re-rendezvous of the run, by cause",
          [](Exposition& x, const proto::RunStatus& r) {
            for (const auto& [cause, count] : r.restarts_by_cause) {
              x.sample({{"run", r.run_id}, {"cause", cause}}, static_cast<double>(count));
            }
          });
  per_run(e, s, "meshrun_arrival_probes_total", "counter",
          "Arrival probes of the run (the straggler measure without beats), by what became of them",
          [](Exposition& x, const proto::RunStatus& r) {
            const auto& t = r.arrival_probes;
            const std::pair<const char*, int64_t> outcomes[] = {
                {"counted", t.counted}, {"imprecise", t.imprecise}, {"partial", t.partial}, {"abandoned", t.abandoned}};
            for (const auto& [outcome, count] : outcomes)
              x.sample({{"run", r.run_id}, {"outcome", outcome}}, static_cast<double>(count));
          });
  per_run(e, s, "meshrun_hangs_total", "counter", "Hangs named in the run, by the verdict's kind",
          [](Exposition& x, const proto::RunStatus& r) {
            for (const auto& [kind, count] : r.hangs_by_kind) {
              x.sample({{"run", r.run_id}, {"kind", kind}}, static_cast<double>(count));
            }
          });
  slow_node_families(e, s);
}

void node_families(Exposition& e, const LiveSnapshot& s) {
  per_run(e, s, "meshrun_node_heartbeat_age_seconds", "gauge", "Seconds since the node's last heartbeat",
          [](Exposition& x, const proto::RunStatus& r) {
            for (const auto& n : r.nodes) {
              // Before ranks are assigned the node id keeps the series apart.
              const std::string node = n.group_rank >= 0 ? std::to_string(n.group_rank) : n.node_id;
              x.sample({{"run", r.run_id}, {"node", node}, {"host", n.host}}, n.since_heartbeat_s);
            }
          });
  per_run(e, s, "meshrun_node_clock_offset_seconds", "gauge",
          "The node's wall clock minus the daemon's, as its agent measured it (nodes not measured yet: absent)",
          [](Exposition& x, const proto::RunStatus& r) {
            for (const auto& n : r.nodes) {
              if (!n.clock.measured) continue;
              const std::string node = n.group_rank >= 0 ? std::to_string(n.group_rank) : n.node_id;
              x.sample({{"run", r.run_id}, {"node", node}, {"host", n.host}}, n.clock.offset_s);
            }
          });
}

void rank_families(Exposition& e, const LiveSnapshot& s) {
  struct Field {
    const char* name;
    const char* help;
    double (*value)(const proto::RankProgress&);
  };
  static const Field kFields[] = {
      {"meshrun_rank_step", "The rank's last reported step", [](const auto& p) { return double(p.step); }},
      {"meshrun_rank_step_seconds", "Median seconds per step (0 until known)",
       [](const auto& p) { return p.step_time_s; }},
      {"meshrun_rank_compute_seconds", "Median compute seconds per step (0: not reported)",
       [](const auto& p) { return p.compute_s; }},
      {"meshrun_rank_loss", "The rank's last reported loss (0: not reported)", [](const auto& p) { return p.loss; }},
      {"meshrun_rank_tokens_per_second", "The rank's last reported tokens/s (0: not reported)",
       [](const auto& p) { return p.tokens_per_s; }},
      {"meshrun_rank_beat_age_seconds", "Age of the rank's last progress beat",
       [](const auto& p) { return p.since_beat_s; }},
      {"meshrun_rank_hung", "1 when the rank's agent judged it hung", [](const auto& p) { return p.hung ? 1.0 : 0.0; }},
      {"meshrun_rank_late", "1 while others wait for the rank in a collective and it is busy (late, not hung)",
       [](const auto& p) { return p.late ? 1.0 : 0.0; }},
      {"meshrun_rank_straggler", "1 when the daemon names the rank a straggler",
       [](const auto& p) { return p.straggler ? 1.0 : 0.0; }},
      {"meshrun_rank_arrival_compute_seconds",
       "Compute per collective derived from collective arrival times (0: not measured)",
       [](const auto& p) { return p.arrival_compute_s; }},
  };
  bool any = false;
  for (const auto& run : s.status.runs) {
    for (const auto& n : run.nodes) any = any || !n.ranks.empty();
  }
  if (!any) return;
  for (const auto& f : kFields) {
    e.family(f.name, "gauge", f.help);
    for (const auto& run : s.status.runs) {
      for (const auto& n : run.nodes) {
        for (const auto& p : n.ranks) {
          e.sample({{"run", run.run_id},
                    {"node", std::to_string(n.group_rank)},
                    {"host", n.host},
                    {"rank", std::to_string(p.rank)}},
                   f.value(p));
        }
      }
    }
  }
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string prometheus_text(const LiveSnapshot& snapshot, size_t http_connections) {
  Exposition e;
  daemon_families(e, snapshot, http_connections);
  run_families(e, snapshot);
  recovery_families(e, snapshot);
  node_families(e, snapshot);
  rank_families(e, snapshot);
  return e.take();
}

}  // namespace meshrun::rendezvous::http

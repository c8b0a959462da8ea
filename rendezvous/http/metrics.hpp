// /metrics: the daemon's state in Prometheus text exposition format 0.0.4 (a `# HELP` and a `# TYPE` line
// before each family, then `name{label="value",...} number` lines). Pure: rendered from a LiveSnapshot.
//
//   meshrun_rendezvous_up, _uptime_seconds, _io_lag_seconds, _info{version}
//   meshrun_store_connections, meshrun_store_keys, meshrun_http_connections
//   meshrun_runs; per run: meshrun_run_round{run}, meshrun_run_state{run,state}, meshrun_run_keys{run},
//   meshrun_nodes{run,state}, meshrun_restarts_total{run,cause}, meshrun_hangs_total{run,kind}
//   per node: meshrun_node_heartbeat_age_seconds{run,node,host}
//   per rank ({run,node,host,rank}): meshrun_rank_step, _step_seconds, _compute_seconds, _loss,
//   _tokens_per_second, _beat_age_seconds, _hung, _straggler
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rendezvous/http/live_state.hpp"

namespace meshrun::rendezvous::http {

/// The Content-Type of the text format.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Every family, for the daemon in `snapshot` with `http_connections` open HTTP connections.
std::string prometheus_text(const LiveSnapshot& snapshot, size_t http_connections);

/// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view value);

}  // namespace meshrun::rendezvous::http

#include "diagnostics/check/check_suite.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/strings.hpp"
#include "common/version.hpp"
#include "diagnostics/check/host_checks.hpp"
#include "diagnostics/check/run_verdict.hpp"
#include "diagnostics/net/network_interfaces.hpp"
#include "diagnostics/peers/peer_checks.hpp"
#include "diagnostics/ping/probe.hpp"
#include "diagnostics/ping/resolve.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"

namespace meshrun::diagnostics {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMaxSkewSeconds = 1.0;

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

// Adds the results of `fn` to `report`, stamping how long the step took (shared by its results).
template <typename Fn>
void timed(CheckReport& report, Fn&& fn) {
  const auto start = Clock::now();
  auto results = fn();
  const double ms = to_seconds(Clock::now() - start) * 1000.0;
  for (auto& r : results) {
    r.elapsed_ms = ms;
    report.add(std::move(r));
  }
}

std::vector<CheckResult> one(CheckResult r) {
  std::vector<CheckResult> v;
  v.push_back(std::move(r));
  return v;
}

// host.route: which local address reaches the endpoint.
CheckResult check_route(const std::string& address, bool multi_node) {
  std::string error;
  const auto source = route_source_address(address, error);
  if (!source) {
    auto r = make_result(CheckStatus::kFail, "host.route", "no route from this host to " + address + ": " + error,
                         "this node is not on a network that reaches the endpoint: use the daemon host's address on a "
                         "network both share, or fix the routing table (ip route)");
    r.data = {{"destination", address}};
    return r;
  }
  std::string interface;
  std::string scope;
  for (const auto& a : list_local_addresses()) {
    if (a.address == *source) {
      interface = a.interface;
      scope = address_scope(a.address);
    }
  }
  const std::string via =
      *source + (interface.empty() ? "" : " on " + interface) + (scope.empty() ? "" : " (" + scope + ")");
  CheckResult r;
  if (multi_node && is_loopback_address(address)) {
    r = make_result(CheckStatus::kWarn, "host.route",
                    "the endpoint " + address + " is a loopback address: only this host can reach it",
                    "for a multi-node job give every node the daemon host's private IP, not localhost/127.0.0.1");
  } else {
    r = make_result(CheckStatus::kPass, "host.route", "reaches " + address + " from " + via);
  }
  r.data = {{"destination", address}, {"source", *source}, {"interface", interface}, {"scope", scope}};
  return r;
}

proto::ConnectOptions connect_options(Duration timeout) {
  proto::ConnectOptions connect;
  connect.connect_timeout = timeout;
  connect.op_timeout = timeout;
  connect.retry_refused = false;
  return connect;
}

// "[refused] connection refused ...": the probe's outcome name, then what happened.
std::string tagged_detail(const ProbeResult& probe) {
  // Built with append(): GCC 12 reports a bogus -Wrestrict for this `"[" + std::string` chain at -O3.
  std::string text = "[";
  text.append(outcome_name(probe.outcome)).append("] ").append(probe.detail);
  return text;
}

// endpoint.dns: the endpoint's addresses, into `addresses` (left empty when the name does not resolve).
CheckResult check_dns(const Endpoint& endpoint, Duration timeout, std::vector<std::string>& addresses) {
  CheckResult r;
  try {
    addresses = resolve_host(endpoint.host, timeout);
    r = make_result(CheckStatus::kPass, "endpoint.dns",
                    is_numeric_address(endpoint.host) ? endpoint.host + " is a numeric address"
                                                      : endpoint.host + " resolves to " + join(addresses));
  } catch (const proto::ConnectError& e) {
    r = make_result(CheckStatus::kFail, "endpoint.dns", e.what(),
                    "use the rendezvous host's IP address, or fix /etc/hosts or DNS on this node");
  }
  r.data = {{"host", endpoint.host}, {"addresses", addresses}};
  return r;
}

// endpoint.tcp: whether the TCP handshake completed, and the store ping time when one was echoed.
CheckResult tcp_result(const Endpoint& numeric, const ProbeResult& probe) {
  const bool connected = probe.connect_s >= 0;
  CheckResult r;
  if (!connected) {
    r = make_result(CheckStatus::kFail, "endpoint.tcp", tagged_detail(probe), probe.hint);
  } else {
    r = make_result(CheckStatus::kPass, "endpoint.tcp",
                    "connected to " + numeric.to_string() + " in " + fixed(probe.connect_s * 1000, 3) + " ms" +
                        (probe.rtt_s >= 0 ? "; store ping round trip " + fixed(probe.rtt_s * 1e6, 0) + " us" : ""));
  }
  r.data = {{"address", numeric.to_string()},
            {"outcome", outcome_name(probe.outcome)},
            {"connect_ms", connected ? nlohmann::json(probe.connect_s * 1000) : nlohmann::json(nullptr)},
            {"rtt_us", probe.rtt_s >= 0 ? nlohmann::json(probe.rtt_s * 1e6) : nlohmann::json(nullptr)}};
  return r;
}

// endpoint.daemon: a meshrun daemon of this node's version, or what answers instead.
CheckResult daemon_result(const ProbeResult& probe) {
  if (probe.outcome != ProbeOutcome::kMeshrun) {
    auto r = make_result(CheckStatus::kFail, "endpoint.daemon", tagged_detail(probe), probe.hint);
    r.data = {{"outcome", outcome_name(probe.outcome)}};
    return r;
  }
  const bool same = probe.hello->version == kVersion;
  auto r =
      make_result(same ? CheckStatus::kPass : CheckStatus::kWarn, "endpoint.daemon", probe.detail,
                  same ? "" : "this node runs meshrun " + std::string(kVersion) + ": use the same version everywhere");
  r.data = {{"outcome", "meshrun"},
            {"server", probe.hello->server},
            {"version", probe.hello->version},
            {"peer", probe.hello->peer}};
  return r;
}

// endpoint.clock_skew: the daemon's wall clock against ours, allowing for half the hello round trip.
CheckResult clock_skew_result(const ProbeResult& probe) {
  const double uncertainty = probe.hello_rtt_s / 2;
  const std::string skew = fixed(std::fabs(probe.skew_s), 3) + " s (+/- " + fixed(uncertainty * 1000, 1) + " ms)";
  const std::string direction = probe.skew_s >= 0 ? "ahead of" : "behind";
  CheckResult r;
  if (std::fabs(probe.skew_s) - uncertainty > kMaxSkewSeconds) {
    r = make_result(CheckStatus::kWarn, "endpoint.clock_skew",
                    "the daemon's clock is " + skew + " " + direction + " this node's",
                    "synchronize clocks (chrony/ntpd) on every node: log timestamps and timeouts are compared "
                    "across hosts");
  } else {
    r = make_result(CheckStatus::kPass, "endpoint.clock_skew", "clocks agree within " + skew);
  }
  r.data = {{"skew_s", probe.skew_s}, {"uncertainty_s", uncertainty}, {"threshold_s", kMaxSkewSeconds}};
  return r;
}

// endpoint.tcp, then (once connected) endpoint.daemon, then (for a meshrun daemon) endpoint.clock_skew.
std::vector<CheckResult> probe_results(const Endpoint& numeric, const ProbeResult& probe) {
  std::vector<CheckResult> out;
  out.push_back(tcp_result(numeric, probe));
  if (probe.connect_s < 0) return out;
  out.push_back(daemon_result(probe));
  if (probe.outcome == ProbeOutcome::kMeshrun) out.push_back(clock_skew_result(probe));
  return out;
}

// rdzv.*: the --rdzv-id run as the daemon sees it; `master_port` gets the run's store port when it is there.
std::vector<CheckResult> check_run(const Endpoint& numeric, const CheckOptions& options, int& master_port) {
  try {
    proto::RendezvousClient client(proto::StoreClient::connect(numeric, connect_options(options.timeout)));
    auto status = client.status(options.run_id);
    bool found = false;
    for (const auto& run : status.runs) {
      if (run.run_id != options.run_id) continue;
      found = true;
      master_port = run.master_port;
    }
    // Not there: list every run, so a mistyped --rdzv-id shows what it should have been.
    if (!found) status = client.status();
    return judge_run(status, {.run_id = options.run_id,
                              .min_nodes = options.min_nodes,
                              .max_nodes = options.max_nodes,
                              .nnodes_given = options.nnodes_given});
  } catch (const Error& e) {
    return one(make_result(CheckStatus::kFail, "rdzv.run",
                           "cannot read the run's status from the daemon: " + std::string(e.what())));
  }
}

// rdzv.master for a run that has a store port: whether workers' MASTER_ADDR:MASTER_PORT answers.
CheckResult master_result(const Endpoint& master, int master_port, Duration timeout) {
  const ProbeResult p = probe_endpoint(master, timeout);
  CheckResult r;
  if (answered(p.outcome)) {
    r = make_result(
        CheckStatus::kPass, "rdzv.master",
        "MASTER_ADDR:MASTER_PORT " + master.to_string() + " answers (store ping " + fixed(p.rtt_s * 1e6, 0) + " us)");
  } else {
    r = make_result(
        CheckStatus::kFail, "rdzv.master",
        "workers' MASTER_ADDR:MASTER_PORT " + master.to_string() + " is not reachable from here: " + tagged_detail(p),
        "workers use the daemon host and the run's own store port: open that port (not only the "
        "rendezvous port) in the daemon host's firewall");
  }
  r.data = {{"master_addr", master.host}, {"master_port", master_port}, {"outcome", outcome_name(p.outcome)}};
  return r;
}

// rdzv.master: workers get MASTER_ADDR = the daemon host as their agent reaches it, and this run's store port.
CheckResult check_master(const std::string& daemon_host, int master_port, Duration timeout) {
  const Endpoint master{daemon_host, static_cast<uint16_t>(master_port)};
  if (master_port > 0) return master_result(master, master_port, timeout);
  auto r = make_result(CheckStatus::kWarn, "rdzv.master", "the run has no store port yet",
                       "it gets one when the first node joins");
  r.data = {{"master_addr", master.host}, {"master_port", master_port}};
  return r;
}

// rdzv.* for the --rdzv-id run, then rdzv.master once the run was found.
void run_checks_for_id(const CheckOptions& options, const Endpoint& numeric, CheckReport& report) {
  int master_port = 0;
  timed(report, [&] { return check_run(numeric, options, master_port); });
  if (report.find("rdzv.nodes") == nullptr) return;
  timed(report, [&] { return one(check_master(options.endpoint->host, master_port, options.timeout)); });
}

// bandwidth.peers and bandwidth.pairs: the pairwise session named by --rdzv-id.
std::vector<CheckResult> check_peers(const Endpoint& numeric, const CheckOptions& options) {
  PeerSessionOptions peer = options.peer_options;
  peer.session = options.run_id;
  peer.peers = options.peers;
  peer.op_timeout = options.timeout;
  try {
    return judge_peer_session(run_peer_session(numeric, peer), peer);
  } catch (const Error& e) {
    auto r = make_result(CheckStatus::kFail, "bandwidth.peers", e.what());
    r.data = {{"session", peer.session},
              {"index", -1},
              {"peers", peer.peers},
              {"joined", 0},
              {"missing", nlohmann::json::array()}};
    return one(std::move(r));
  }
}

std::string bandwidth_detail(const Endpoint& numeric, const BandwidthResult& b) {
  return "to " + numeric.to_string() + ": upload " + fixed(b.upload_gbps, 3) + " GB/s, download " +
         fixed(b.download_gbps, 3) + " GB/s (" + std::to_string(b.bytes >> 10) + " KiB values, best of " +
         std::to_string(b.iterations) + "); latency avg " + fixed(b.latency_avg_us, 0) + " us (min " +
         fixed(b.latency_min_us, 0) + ", max " + fixed(b.latency_max_us, 0) + ")";
}

// bandwidth.tcp: throughput and latency between this node and the daemon.
CheckResult check_bandwidth(const Endpoint& numeric, const BandwidthOptions& options) {
  try {
    const auto b = measure_bandwidth(numeric, options);
    auto r = make_result(CheckStatus::kPass, "bandwidth.tcp", bandwidth_detail(numeric, b));
    r.data = {{"upload_gbps", b.upload_gbps},       {"download_gbps", b.download_gbps},
              {"latency_min_us", b.latency_min_us}, {"latency_avg_us", b.latency_avg_us},
              {"latency_max_us", b.latency_max_us}, {"bytes", b.bytes},
              {"iterations", b.iterations}};
    return r;
  } catch (const Error& e) {
    return make_result(CheckStatus::kFail, "bandwidth.tcp", std::string("measurement failed: ") + e.what(),
                       "the daemon may cap message sizes (--max-message-bytes): try a smaller --bandwidth-bytes");
  }
}

// endpoint.*, then rdzv.* and bandwidth.*, each only when the endpoint got far enough to make it meaningful.
void endpoint_checks(const CheckOptions& options, CheckReport& report) {
  const Endpoint& endpoint = *options.endpoint;
  std::vector<std::string> addresses;
  timed(report, [&] { return one(check_dns(endpoint, options.timeout, addresses)); });
  if (addresses.empty()) return;
  const Endpoint numeric{addresses.front(), endpoint.port};

  timed(report, [&] { return one(check_route(numeric.host, options.max_nodes > 1)); });

  ProbeResult probe;
  timed(report, [&] {
    probe = probe_endpoint(numeric, options.timeout);
    return probe_results(numeric, probe);
  });
  if (probe.outcome != ProbeOutcome::kMeshrun) return;

  // With --peers the id names the bandwidth session, not a launcher run.
  if (!options.run_id.empty() && options.peers == 0) run_checks_for_id(options, numeric, report);

  if (options.peers > 0) {
    timed(report, [&] { return check_peers(numeric, options); });
  } else if (options.bandwidth) {
    timed(report, [&] { return one(check_bandwidth(numeric, options.bandwidth_options)); });
  }
}

}  // namespace

CheckReport run_checks(const CheckOptions& options) {
  CheckReport report;
  const bool multi_node = options.max_nodes > 1;
  timed(report, [&] { return one(check_hostname(multi_node, options.timeout)); });
  timed(report, [&] { return one(check_interfaces(multi_node)); });
  timed(report, [&] { return check_socket_ifname_env(); });
  if (!options.ports.empty()) {
    std::optional<uint16_t> endpoint_port;
    if (options.endpoint) endpoint_port = options.endpoint->port;
    timed(report, [&] { return one(check_ports(options.ports, endpoint_port)); });
  }
  timed(report, [&] { return check_gpus(options.nproc_per_node); });
  if (options.endpoint) endpoint_checks(options, report);
  return report;
}

}  // namespace meshrun::diagnostics

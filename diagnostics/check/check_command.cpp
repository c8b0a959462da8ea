// `meshrun check`: CLI wiring for run_checks (flags -> CheckOptions -> report on stdout).
#include <CLI/CLI.hpp>

#include <charconv>
#include <iostream>
#include <optional>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "diagnostics/check/check_suite.hpp"
#include "diagnostics/diagnostics.hpp"

namespace meshrun::diagnostics {
namespace {

int parse_count(const std::string& text, const std::string& spec) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 1) {
    throw UsageError("--nnodes '" + spec + "': expected N or MIN:MAX with positive integers");
  }
  return value;
}

// "--nnodes 2" or "--nnodes 1:4", as torchrun takes it.
void parse_nnodes(const std::string& spec, CheckOptions& options) {
  const auto colon = spec.find(':');
  options.min_nodes = parse_count(spec.substr(0, colon), spec);
  options.max_nodes = colon == std::string::npos ? options.min_nodes : parse_count(spec.substr(colon + 1), spec);
  if (options.max_nodes < options.min_nodes) {
    throw UsageError("--nnodes '" + spec + "': MAX is smaller than MIN");
  }
  options.nnodes_given = true;
}

// "--nproc-per-node 8"; nothing for auto, gpu, cpu or when not given (the GPU check then has no count to compare).
std::optional<int> parse_nproc(const std::string& nproc) {
  if (nproc.empty() || nproc == "auto" || nproc == "gpu" || nproc == "cpu") return std::nullopt;
  int n = 0;
  auto [ptr, ec] = std::from_chars(nproc.data(), nproc.data() + nproc.size(), n);
  if (ec != std::errc() || ptr != nproc.data() + nproc.size() || n < 1) {
    throw UsageError("--nproc-per-node '" + nproc + "': expected a positive integer, auto, gpu or cpu");
  }
  return n;
}

// Flags as typed, before they become CheckOptions (which CLI11 fills directly where no conversion is needed).
struct CheckFlags {
  std::string endpoint;
  std::string nnodes;
  std::string nproc;
  std::vector<uint16_t> ports;
  double timeout_s = 2.0;
  double bandwidth_mib = 8;
  bool as_json = false;
  double peers_timeout_s = 60;
  double peer_mib = 256;
  double peer_seconds = 2;
};

// Declares every flag; the order here is the order of --help.
void add_check_flags(CLI::App& app, CheckFlags& flags, CheckOptions& options) {
  app.option_defaults()->group("What to check");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", flags.endpoint,
                 "Rendezvous daemon, HOST[:PORT] (default port 29400)");
  app.add_option("--rdzv-id,--rdzv_id", options.run_id, "Run to inspect on the daemon (joined, missing, stale nodes)");
  app.add_option("--nnodes", flags.nnodes,
                 "Nodes the job expects, N or MIN:MAX (multi-node enables reachability warnings)");
  app.add_option("--nproc-per-node,--nproc_per_node", flags.nproc, "Workers per node, compared with the visible GPUs");
  app.add_option("--port", flags.ports,
                 "Local port(s) that must be free for a daemon/master on this host "
                 "(default: 29400 and 29500)");
  app.add_option("--timeout", flags.timeout_s, "Seconds allowed for each network step")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 120.0));
  app.add_flag("--json", flags.as_json,
               "Print one JSON document instead of lines (its fields: docs/troubleshooting.md)");
  app.option_defaults()->group("How fast the network is");
  app.add_flag("--bandwidth", options.bandwidth, "Also measure TCP throughput (GB/s) and latency (us) to the endpoint");
  app.add_option("--bandwidth-mib", flags.bandwidth_mib, "Value size for --bandwidth, in MiB")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 64.0));
  app.option_defaults()->group("Every pair of nodes (--peers)");
  app.add_option("--peers", options.peers,
                 "Measure every pair of N nodes (implies --bandwidth): start this same command on each of the N "
                 "nodes; --rdzv-id names the session")
      ->check(CLI::Range(2, 4096));
  app.add_option("--peers-timeout", flags.peers_timeout_s, "Seconds the first instance waits for all --peers instances")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--peer-mib", flags.peer_mib, "With --peers: MiB sent per pair and direction, at most")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 65536.0));
  app.add_option("--peer-seconds", flags.peer_seconds, "With --peers: seconds per pair and direction, at most")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
}

// Rejects flag combinations that cannot work; --peers turns --bandwidth on.
void check_flag_combinations(CheckOptions& options) {
  if (!options.run_id.empty() && !options.endpoint) {
    throw UsageError("--rdzv-id needs --rdzv-endpoint (the daemon that knows the run)");
  }
  if (options.peers > 0) {
    options.bandwidth = true;
    if (options.run_id.empty()) {
      throw UsageError("--peers needs --rdzv-id: the name every instance of this measurement shares");
    }
  }
  if (options.bandwidth && !options.endpoint) throw UsageError("--bandwidth needs --rdzv-endpoint");
}

// Completes `options` from the typed flags; throws UsageError naming the first bad flag.
void apply_flags(const CheckFlags& flags, CheckOptions& options) {
  if (!flags.endpoint.empty()) options.endpoint = parse_endpoint(flags.endpoint, kDefaultRendezvousPort);
  check_flag_combinations(options);
  if (!flags.nnodes.empty()) parse_nnodes(flags.nnodes, options);
  options.nproc_per_node = parse_nproc(flags.nproc);
  options.ports = flags.ports.empty() ? std::vector<uint16_t>{kDefaultRendezvousPort, kDefaultMasterPort} : flags.ports;
  options.timeout = from_seconds(flags.timeout_s);
  options.bandwidth_options.bytes = static_cast<size_t>(flags.bandwidth_mib * 1024 * 1024);
  options.peer_options.join_timeout = from_seconds(flags.peers_timeout_s);
  options.peer_options.bytes = static_cast<uint64_t>(flags.peer_mib * 1024 * 1024);
  options.peer_options.max_transfer = from_seconds(flags.peer_seconds);
}

}  // namespace

int run_check_command(int argc, char** argv) {
  CLI::App app{"meshrun check: say why a multi-node job cannot start (this node, the endpoint, the run)",
               "meshrun check"};
  CheckFlags flags;
  CheckOptions options;
  add_check_flags(app, flags, options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  apply_flags(flags, options);  // a UsageError: run_main says so, exit 2
  const CheckReport report = run_checks(options);
  if (flags.as_json) {
    std::cout << report.to_json().dump(2) << std::endl;
  } else {
    std::cout << report.to_text() << std::flush;
  }
  return report.exit_code();
}

}  // namespace meshrun::diagnostics

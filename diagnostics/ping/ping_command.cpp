// `meshrun ping HOST[:PORT]`: ping(8) over TCP to a rendezvous daemon (or any TCP port).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <thread>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "diagnostics/diagnostics.hpp"
#include "diagnostics/ping/probe.hpp"
#include "diagnostics/ping/resolve.hpp"
#include "diagnostics/ping/sample_stats.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

std::string ms_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1000.0);
  return buf;
}

std::string stats_line(const char* what, const SampleStats& s) {
  return std::string(what) + " min/avg/max/mdev = " + ms_text(s.min) + "/" + ms_text(s.avg) + "/" + ms_text(s.max) +
         "/" + ms_text(s.mdev) + " ms";
}

std::string probe_line(int seq, const ProbeResult& r) {
  std::string line = "seq=" + std::to_string(seq) + " ";
  if (answered(r.outcome)) {
    line += r.address + ": ";
    line += r.hello ? r.hello->server + " " + r.hello->version : std::string("TCPStore (not meshrun)");
    line += ", connect " + ms_text(r.connect_s) + " ms, rtt " + ms_text(r.rtt_s) + " ms";
    if (r.outcome == ProbeOutcome::kTcpStore) line += " [tcpstore] " + r.detail;
    return line;
  }
  line += "[" + std::string(outcome_name(r.outcome)) + "] " + r.detail;
  if (r.connect_s >= 0) line += " (connect " + ms_text(r.connect_s) + " ms)";
  return line;
}

int ping(const Endpoint& endpoint, int count, double interval_s, double timeout_s) {
  const Duration timeout = from_seconds(timeout_s);
  // Resolve once, like ping(8): every probe then measures the network, not the resolver.
  std::string address;
  try {
    address = resolve_host(endpoint.host, timeout).front();
  } catch (const proto::ConnectError& e) {
    std::cout << "meshrun ping: [resolve] " << e.what() << "\n";
    std::cout << "hint: use the rendezvous host's IP address, or fix /etc/hosts or DNS on this node\n";
    return 1;
  }
  const Endpoint target{address, endpoint.port};
  std::cout << "MESHRUN PING " << endpoint.to_string() << " (" << target.to_string()
            << "): TCP connect + store ping + meshrun hello, timeout " << timeout_s << " s" << std::endl;
  std::vector<double> connects;
  std::vector<double> rtts;
  std::map<std::string, int> failures;
  std::string last_hint;
  int sent = 0;
  for (int seq = 1; seq <= count; ++seq) {
    const auto started = std::chrono::steady_clock::now();
    const ProbeResult r = probe_endpoint(target, timeout);
    ++sent;
    std::cout << probe_line(seq, r) << std::endl;
    if (r.connect_s >= 0) connects.push_back(r.connect_s);
    if (answered(r.outcome)) {
      rtts.push_back(r.rtt_s);
    } else {
      ++failures[outcome_name(r.outcome)];
      last_hint = r.hint;
    }
    if (seq < count) std::this_thread::sleep_until(started + from_seconds(interval_s));
  }
  const int answered_count = static_cast<int>(rtts.size());
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.1f%%", 100.0 * (sent - answered_count) / std::max(1, sent));
  std::cout << "\n--- " << endpoint.to_string() << " meshrun ping statistics ---\n"
            << sent << " sent, " << answered_count << " answered, " << loss << " loss\n";
  if (!connects.empty()) std::cout << stats_line("connect", compute_stats(connects)) << "\n";
  if (!rtts.empty()) std::cout << stats_line("rtt", compute_stats(rtts)) << "\n";
  if (!failures.empty()) {
    std::string list;
    for (const auto& [name, n] : failures) list += (list.empty() ? "" : ", ") + std::to_string(n) + " x " + name;
    std::cout << "failures: " << list << "\n";
    if (!last_hint.empty()) std::cout << "hint: " << last_hint << "\n";
  }
  std::cout.flush();
  return answered_count == sent ? 0 : 1;
}

}  // namespace

int run_ping_command(int argc, char** argv) {
  CLI::App app{"meshrun ping: TCP ping to a rendezvous daemon (or any TCP port), naming why it does not answer",
               "meshrun ping"};
  std::string target;
  int count = 4;
  double interval_s = 1.0;
  double timeout_s = 2.0;
  app.add_option("target", target, "HOST[:PORT] (default port 29400)")->required();
  app.add_option("-c,--count", count, "Number of probes")->capture_default_str()->check(CLI::Range(1, 1'000'000));
  app.add_option("-i,--interval", interval_s, "Seconds between probes")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("-W,--timeout", timeout_s, "Seconds to wait for each probe")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 600.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ping(parse_endpoint(target, kDefaultRendezvousPort), count, interval_s, timeout_s);
}

}  // namespace meshrun::diagnostics

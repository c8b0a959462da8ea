// probe_endpoint: one diagnostic exchange with HOST:PORT that says what, if anything, answers there.
//
//   resolve -> TCP connect -> VALIDATE + PING (echo?) -> MESHRUN hello (meshrun-rendezvous?)
//
// Each step that fails maps to one ProbeOutcome, so `meshrun ping` and `meshrun check` can name the
// culprit (nothing listening, packets dropped, not a daemon, rejected by --allow...) instead of hanging.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.hpp"
#include "common/endpoint.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::diagnostics {

enum class ProbeOutcome {
  kMeshrun,      // a meshrun-rendezvous daemon answered the ping and the hello
  kTcpStore,     // a TCPStore server answered the ping but does not speak meshrun (e.g. PyTorch's)
  kResolve,      // the host name does not resolve
  kRefused,      // nothing listens on that port (RST)
  kTimeout,      // no answer to the TCP handshake: packets dropped (firewall, wrong interface or route)
  kUnreachable,  // no route to that address from this host
  kNotStore,     // something accepted the connection but is not a TCPStore/meshrun daemon
  kRejected,     // a meshrun daemon refused this host (its --allow rules)
  kError,        // anything else (the detail says what)
};

/// Stable lower-case name: "meshrun", "tcpstore", "resolve", "refused", "timeout", "unreachable",
/// "not-a-store", "rejected", "error". Tests and --json rely on these.
const char* outcome_name(ProbeOutcome outcome);

/// True when the peer answered a store ping (meshrun or plain TCPStore).
bool answered(ProbeOutcome outcome);

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kError;
  std::string address;    // the numeric address connected to ("127.0.0.1:29400")
  double connect_s = -1;  // TCP handshake time; -1 when it did not complete
  double rtt_s = -1;      // store PING round trip; -1 when there was no echo
  std::optional<proto::Hello> hello;
  double hello_rtt_s = -1;  // hello round trip, bounds the clock-skew error
  double skew_s = 0;        // daemon wall clock minus ours at the midpoint of the hello exchange
  std::string detail;       // what happened, naming the endpoint
  std::string hint;         // what to check next; empty when nothing is wrong
};

/// Probes `endpoint` once; every step shares one deadline of `timeout` (a rejection re-check may add
/// one more). Never throws for network conditions: they are the result.
ProbeResult probe_endpoint(const Endpoint& endpoint, Duration timeout);

}  // namespace meshrun::diagnostics

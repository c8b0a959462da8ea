// run_checks: everything `meshrun check` looks at, in order, each step bounded by options.timeout:
//   host.*      this node: name, interfaces, NCCL/GLOO_SOCKET_IFNAME, local ports
//   gpu.*       CUDA driver, device count vs --nproc-per-node, NCCL
//   endpoint.*  the rendezvous endpoint: DNS, route, TCP, daemon identity, clock skew
//   rdzv.*      one run (--rdzv-id): joined/expected, missing and duplicate ranks, stale heartbeats,
//               MASTER_ADDR reachability
//   bandwidth.* (--bandwidth) throughput and latency to the endpoint; with --peers N, between every
//               pair of the N instances started on the nodes instead (peer_session.hpp)
// Checks that depend on an unreachable endpoint are left out rather than waited for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "common/endpoint.hpp"
#include "diagnostics/check/bandwidth.hpp"
#include "diagnostics/peers/peer_session.hpp"
#include "diagnostics/report/check_report.hpp"

namespace meshrun::diagnostics {

struct CheckOptions {
  std::optional<Endpoint> endpoint;  // --rdzv-endpoint
  std::string run_id;                // --rdzv-id; empty: no run checks
  int min_nodes = 1;                 // --nnodes N or MIN:MAX
  int max_nodes = 1;
  bool nnodes_given = false;
  std::optional<int> nproc_per_node;           // --nproc-per-node
  std::vector<uint16_t> ports;                 // --port; checked for a listener on this host
  Duration timeout = std::chrono::seconds(2);  // per network step
  bool bandwidth = false;                      // --bandwidth
  BandwidthOptions bandwidth_options;
  int peers = 0;                    // --peers; > 0: pairwise session named by run_id (no rdzv.* checks)
  PeerSessionOptions peer_options;  // session, peers and op_timeout are filled from the fields above
};

/// Runs every applicable check; never throws for what it finds (findings are results).
CheckReport run_checks(const CheckOptions& options);

}  // namespace meshrun::diagnostics

// TCP throughput and latency between this node and a rendezvous daemon, measured with ordinary store
// operations (the daemon has no echo or bulk op): SET a large value under a unique scratch key, GET it
// back, DELETE it; latency from store PING round trips.
#pragma once

#include <cstddef>

#include "common/clock.hpp"
#include "common/endpoint.hpp"

namespace meshrun::diagnostics {

struct BandwidthOptions {
  size_t bytes = 8 * 1024 * 1024;               // value size; the daemon's default cap is far above this
  int iterations = 3;                           // SET/GET pairs; the best one is reported
  int pings = 20;                               // latency samples
  Duration timeout = std::chrono::seconds(10);  // bounds each store operation
};

struct BandwidthResult {
  double upload_gbps = 0;    // GB/s (1e9 bytes), this node -> daemon, best iteration
  double download_gbps = 0;  // daemon -> this node
  double latency_min_us = 0;
  double latency_avg_us = 0;
  double latency_max_us = 0;
  size_t bytes = 0;
  int iterations = 0;
};

/// Runs the measurement; throws meshrun::Error (NetworkError, TimeoutError...) when the daemon
/// cannot be used. The scratch key is deleted even when a later step fails.
BandwidthResult measure_bandwidth(const Endpoint& endpoint, const BandwidthOptions& options);

}  // namespace meshrun::diagnostics

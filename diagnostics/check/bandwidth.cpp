#include "diagnostics/check/bandwidth.hpp"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/error.hpp"
#include "diagnostics/ping/sample_stats.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

using Clock = std::chrono::steady_clock;

std::string scratch_key() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  return "meshrun/check/bandwidth/" + std::string(host) + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

// Deletes the scratch key however the measurement ends.
class ScratchKey {
 public:
  ScratchKey(proto::StoreClient& client, std::string key) : client_(client), key_(std::move(key)) {}
  ScratchKey(const ScratchKey&) = delete;
  ScratchKey& operator=(const ScratchKey&) = delete;
  ~ScratchKey() {
    try {
      client_.delete_key(key_);
    } catch (const std::exception&) {
      // The connection is gone; the daemon drops nothing else, so the key stays until it restarts.
    }
  }
  const std::string& name() const { return key_; }

 private:
  proto::StoreClient& client_;
  std::string key_;
};

}  // namespace

BandwidthResult measure_bandwidth(const Endpoint& endpoint, const BandwidthOptions& options) {
  proto::ConnectOptions connect;
  connect.connect_timeout = options.timeout;
  connect.op_timeout = options.timeout;
  connect.retry_refused = false;
  auto client = proto::StoreClient::connect(endpoint, connect);

  BandwidthResult result;
  result.bytes = options.bytes;
  result.iterations = options.iterations;
  std::vector<double> latencies;
  for (int i = 0; i < options.pings; ++i) {
    const auto t0 = Clock::now();
    client.ping(static_cast<uint32_t>(i + 1));
    latencies.push_back(to_seconds(Clock::now() - t0) * 1e6);
  }
  const auto stats = compute_stats(latencies);
  result.latency_min_us = stats.min;
  result.latency_avg_us = stats.avg;
  result.latency_max_us = stats.max;

  // Bytes that do not compress (nothing compresses here, but keep it honest for future transports).
  std::string value(options.bytes, '\0');
  std::mt19937_64 rng(42);
  for (auto& c : value) c = static_cast<char>(rng());
  ScratchKey key(client, scratch_key());
  for (int i = 0; i < options.iterations; ++i) {
    // SET has no reply: the PING behind it returns once the daemon has read the whole value.
    const auto t0 = Clock::now();
    client.set(key.name(), value);
    client.ping(0x5e7u);
    const double up = to_seconds(Clock::now() - t0);
    const auto t1 = Clock::now();
    const std::string back = client.get(key.name());
    const double down = to_seconds(Clock::now() - t1);
    if (back.size() != value.size()) {
      throw ProtocolError("bandwidth test: " + endpoint.to_string() + " returned " + std::to_string(back.size()) +
                          " bytes for a " + std::to_string(value.size()) + "-byte value");
    }
    result.upload_gbps = std::max(result.upload_gbps, static_cast<double>(value.size()) / up / 1e9);
    result.download_gbps = std::max(result.download_gbps, static_cast<double>(value.size()) / down / 1e9);
  }
  return result;
}

}  // namespace meshrun::diagnostics

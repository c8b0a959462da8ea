#include "rendezvous/http/health.hpp"

#include <fmt/format.h>

namespace meshrun::rendezvous::http {

Health judge_health(const LiveSnapshot* snapshot, double answer_s, size_t http_connections) {
  Health h;
  h.body = {{"answer_ms", answer_s * 1000}, {"http_connections", http_connections}};
  if (snapshot == nullptr) {
    h.body["status"] = "unhealthy";
    h.body["reason"] =
        fmt::format("the io thread (store and rendezvous) did not answer within {} ms", kHealthDeadline.count());
    return h;
  }
  const auto& s = snapshot->status;
  h.body["uptime_s"] = s.uptime_s;
  h.body["connections"] = s.connections;
  h.body["keys"] = s.keys;
  h.body["runs"] = s.runs.size();
  h.body["io_lag_ms"] = snapshot->io_lag_s * 1000;
  h.healthy = snapshot->io_lag_s <= kMaxHealthyLagSeconds;
  h.body["status"] = h.healthy ? "ok" : "unhealthy";
  if (!h.healthy) {
    h.body["reason"] = fmt::format("the io loop ran {:.0f} ms late in the last 10 s (limit {:.0f} ms)",
                                   snapshot->io_lag_s * 1000, kMaxHealthyLagSeconds * 1000);
  }
  return h;
}

}  // namespace meshrun::rendezvous::http

// /health: whether the daemon is serving, judged from a round trip to its io thread (the thread that
// answers every store and rendezvous request) and from the io loop's measured lag. Pure.
#pragma once

#include <chrono>
#include <cstddef>

#include <nlohmann/json.hpp>

#include "rendezvous/http/live_state.hpp"

namespace meshrun::rendezvous::http {

/// The io thread must answer /health's question within this long...
inline constexpr std::chrono::milliseconds kHealthDeadline{1000};
/// ...and its timers must not have run later than this over the lag window (live_state.cpp).
inline constexpr double kMaxHealthyLagSeconds = 1.0;

struct Health {
  bool healthy = false;
  nlohmann::json body;  // {"status": "ok"|"unhealthy", "reason"?, "uptime_s", "connections", ...}
};

/// `snapshot` is null when the io thread did not answer within kHealthDeadline; `answer_s` is how long
/// it took (or the deadline); `http_connections` counts the HTTP connections open now.
Health judge_health(const LiveSnapshot* snapshot, double answer_s, size_t http_connections);

}  // namespace meshrun::rendezvous::http

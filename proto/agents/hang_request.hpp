// HangRequest: the suspicion one agent raises in the workers' store for every agent of the attempt
// (launcher/hang/hang_exchange.hpp): who suspects, which rank looked hung and why, and how long it had
// waited. Every node judges with these same figures, so a busy rank is late, or past --hang-busy-timeout,
// on every node alike. JSON in the store.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace meshrun::proto {

/// What made the agent suspect a hang.
enum class SuspicionRoute {
  kUnknown,
  kCollectiveWait,  // a rank waited in a collective past its budget
  kSilence,         // a rank that beats went silent past its budget
  kStopped,         // a worker stopped by a signal
};

NLOHMANN_JSON_SERIALIZE_ENUM(SuspicionRoute, {{SuspicionRoute::kUnknown, "unknown"},
                                              {SuspicionRoute::kCollectiveWait, "collective_wait"},
                                              {SuspicionRoute::kSilence, "silence"},
                                              {SuspicionRoute::kStopped, "stopped"}})

struct HangRequest {
  int node = -1;        // the group rank of the agent that suspects
  int rank = -1;        // the rank that looked hung (-1: unknown)
  std::string reason;   // "waits in collective #21 of group 0 for 61.2 s (budget 60.5 s)"
  double waited_s = 0;  // how long that rank had waited in its collective, or been silent
  SuspicionRoute route = SuspicionRoute::kUnknown;

  bool operator==(const HangRequest&) const = default;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HangRequest, node, rank, reason, waited_s, route)

/// The request as stored.
inline std::string encode(const HangRequest& request) { return nlohmann::json(request).dump(); }

/// A stored request; a value that is not one (an agent of another version) reads as an unknown rank, with the
/// text as its reason.
inline HangRequest decode_hang_request(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object()) {
    try {
      return j.get<HangRequest>();
    } catch (const nlohmann::json::exception&) {}
  }
  return HangRequest{.reason = text};
}

}  // namespace meshrun::proto

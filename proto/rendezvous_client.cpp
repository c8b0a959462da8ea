#include "proto/rendezvous_client.hpp"

#include <nlohmann/json.hpp>

namespace meshrun::proto {

Hello RendezvousClient::hello() { return client_.meshrun({{"op", "hello"}}).get<Hello>(); }

std::string RendezvousClient::join(const JoinRequest& request) {
  nlohmann::json j = request;
  j["op"] = "join";
  return client_.meshrun(j).at("node_id").get<std::string>();
}

AwaitReply RendezvousClient::await(const std::string& run_id, const std::string& node_id, Duration timeout) {
  const nlohmann::json j = {
      {"op", "await"}, {"run_id", run_id}, {"node_id", node_id}, {"timeout_s", to_seconds(timeout)}};
  // The daemon answers by `timeout` at the latest; allow for the round trip on top.
  return client_.meshrun(j, timeout + std::chrono::seconds(10)).get<AwaitReply>();
}

HeartbeatReply RendezvousClient::heartbeat(const std::string& run_id, const std::string& node_id,
                                           const std::vector<RankProgress>& progress, std::optional<Duration> timeout) {
  nlohmann::json j = {{"op", "heartbeat"}, {"run_id", run_id}, {"node_id", node_id}};
  if (!progress.empty()) j["progress"] = progress;
  return client_.meshrun(j, timeout).get<HeartbeatReply>();
}

void RendezvousClient::report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason,
                                      RestartCause cause) {
  client_.meshrun({{"op", "fail"}, {"run_id", run_id}, {"node_id", node_id}, {"reason", reason}, {"cause", cause}});
}

void RendezvousClient::record_failure(const std::string& run_id, const std::string& node_id,
                                      const FailureReport& failure) {
  client_.meshrun({{"op", "failure"}, {"run_id", run_id}, {"node_id", node_id}, {"failure", failure}});
}

void RendezvousClient::leave(const std::string& run_id, const std::string& node_id, const std::string& reason,
                             bool ok) {
  client_.meshrun({{"op", "leave"}, {"run_id", run_id}, {"node_id", node_id}, {"reason", reason}, {"ok", ok}});
}

StatusReply RendezvousClient::status(const std::string& run_id) {
  nlohmann::json j = {{"op", "status"}};
  if (!run_id.empty()) j["run_id"] = run_id;
  return client_.meshrun(j).get<StatusReply>();
}

}  // namespace meshrun::proto

#include "proto/rendezvous/rendezvous_client.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "proto/store/request.hpp"

namespace meshrun::proto {

namespace {

const nlohmann::json kHello = {{"op", "hello"}};

}  // namespace

Hello RendezvousClient::hello() { return client_.meshrun(kHello).get<Hello>(); }

std::string encode_hello_request() {
  return encode_request({.type = QueryType::kMeshrun, .keys = {}, .values = {kHello.dump()}, .number = 0});
}

void RendezvousClient::authenticate(const std::string& token) {
  const nlohmann::json challenge = client_.meshrun({{"op", "challenge"}});
  const bool required = challenge.value("required", false);
  if (token.empty()) {
    if (required) {
      throw RemoteError(std::string("the rendezvous requires a join token: set ") + kTokenEnv +
                        " (or --rdzv-conf token=...) to the job's token on this node");
    }
    return;
  }
  if (!required) {
    throw RemoteError(std::string("this node has a join token (") + kTokenEnv +
                      ") but the rendezvous requires none: start it with the same token, or unset it here");
  }
  const std::string daemon_nonce = challenge.at("nonce").get<std::string>();
  const std::string client_nonce = make_nonce();
  const nlohmann::json reply = client_.meshrun(
      {{"op", "auth"}, {"client_nonce", client_nonce}, {"proof", client_proof(token, daemon_nonce, client_nonce)}});
  if (!equal_constant_time(reply.value("proof", std::string()), daemon_proof(token, daemon_nonce, client_nonce))) {
    throw RemoteError("the rendezvous could not prove it knows the join token: it is not this job's rendezvous");
  }
}

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
                                           const std::vector<RankProgress>& progress, std::optional<Duration> timeout,
                                           const ClockReading& clock, const AttemptMilestones& attempt) {
  nlohmann::json j = {{"op", "heartbeat"}, {"run_id", run_id}, {"node_id", node_id}};
  if (!progress.empty()) j["progress"] = progress;
  if (clock.measured) j["clock"] = clock;
  if (attempt.round >= 0) j["attempt"] = attempt;
  return client_.meshrun(j, timeout).get<HeartbeatReply>();
}

void RendezvousClient::report_failure(const std::string& run_id, const std::string& node_id, const std::string& reason,
                                      RestartCause cause) {
  client_.meshrun({{"op", "fail"}, {"run_id", run_id}, {"node_id", node_id}, {"reason", reason}, {"cause", cause}});
}

void RendezvousClient::record_failure(const std::string& run_id, const std::string& node_id,
                                      const FailureReport& failure, const AttemptMilestones& attempt) {
  nlohmann::json j = {{"op", "failure"}, {"run_id", run_id}, {"node_id", node_id}, {"failure", failure}};
  if (attempt.round >= 0) j["attempt"] = attempt;
  client_.meshrun(j);
}

std::optional<GoodputReport> RendezvousClient::leave(const std::string& run_id, const std::string& node_id,
                                                     const std::string& reason, bool ok,
                                                     const AttemptMilestones& attempt) {
  nlohmann::json j = {{"op", "leave"}, {"run_id", run_id}, {"node_id", node_id}, {"reason", reason}, {"ok", ok}};
  if (attempt.round >= 0) j["attempt"] = attempt;
  const nlohmann::json reply = client_.meshrun(j);
  if (!reply.contains("goodput")) return std::nullopt;
  return reply.at("goodput").get<GoodputReport>();
}

StatusReply RendezvousClient::status(const std::string& run_id) {
  nlohmann::json j = {{"op", "status"}};
  if (!run_id.empty()) j["run_id"] = run_id;
  return client_.meshrun(j).get<StatusReply>();
}

}  // namespace meshrun::proto

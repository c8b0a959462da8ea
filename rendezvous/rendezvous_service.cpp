#include "rendezvous/rendezvous_service.hpp"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "common/version.hpp"
#include "proto/rendezvous/join_auth.hpp"

namespace meshrun::rendezvous {

using nlohmann::json;

namespace {

// Deadlines (keep-alive expiry, last call, await timeouts) are checked this often: late by at most this
// much, at the cost of a no-op wake-up per interval when idle.
constexpr auto kTickInterval = std::chrono::milliseconds(50);
// An await parks its connection; the cap keeps every request answered within half a minute (the
// protocol's documented limit), and agents simply await again.
constexpr double kMaxAwaitSeconds = 30.0;
// An await that names no timeout (older clients) waits this long.
constexpr double kDefaultAwaitSeconds = 5.0;
// One progress entry per local rank: a node has at most this many ranks worth reporting (bounds the
// memory a heartbeat can make the daemon keep).
constexpr size_t kMaxProgressEntries = 1024;

}  // namespace

RendezvousService::RendezvousService(boost::asio::io_context& io, RunPorts& ports, std::string join_token)
    : ports_(ports), join_token_(std::move(join_token)), tick_timer_(io) {
  schedule_tick();
}

std::optional<json> RendezvousService::handle(const std::shared_ptr<StoreConnection>& connection, const json& request) {
  const std::string op = request.value("op", std::string());
  std::optional<json> reply;
  try {
    reply = dispatch(op, connection, request);
  } catch (const RemoteError& e) {
    spdlog::warn("{} from {} refused: {}", op, connection->peer(), e.what());
    reply = json{{"error", e.what()}};
  } catch (const json::exception& e) {
    reply = json{{"error", "malformed '" + op + "' request: " + e.what()}};
  }
  check_awaits(false);
  return reply;
}

std::optional<json> RendezvousService::dispatch(const std::string& op,
                                                const std::shared_ptr<StoreConnection>& connection,
                                                const json& request) {
  if (op == "hello") return hello(*connection);
  if (op == "challenge") return challenge(*connection);
  if (op == "auth") return authenticate(*connection, request);
  if (!join_token_.empty() && op != "status" && !connection->join_auth().proven) {
    throw RemoteError(std::string("this rendezvous requires a join token and the connection has not proven it: set ") +
                      proto::kTokenEnv + " to the job's token on that node");
  }
  if (op == "join") return join(request.get<proto::JoinRequest>());
  if (op == "await") return await(connection, request);
  if (op == "heartbeat") {
    auto progress = request.value("progress", std::vector<proto::RankProgress>{});
    if (progress.size() > kMaxProgressEntries) {
      return json{{"error", "heartbeat carries " + std::to_string(progress.size()) + " progress entries; at most " +
                                std::to_string(kMaxProgressEntries) + " (one per local rank)"}};
    }
    auto reply = membership_.heartbeat(
        request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>(), std::move(progress),
        request.value("clock", proto::ClockReading{}), request.value("attempt", proto::AttemptMilestones{}));
    // The agent reads its clock's offset from this (the last thing done before the reply leaves).
    reply.server_unix_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    json out = reply;
    if (reply.recovered_round == 0) {  // most replies: no ledger to carry (agents read the defaults)
      out.erase("recovered_round");
      out.erase("recovery");
    }
    return out;
  }
  if (op == "fail") {
    membership_.report_failure(request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>(),
                               request.value("reason", std::string("unknown")),
                               request.value("cause", proto::RestartCause::kWorkerFailed));
    return json::object();
  }
  if (op == "failure") {
    auto failure = request.at("failure").get<proto::FailureReport>();
    // The daemon's clock orders the reports of every node: no skew between the agents' clocks.
    failure.unix_ms = unix_time_ms() - static_cast<int64_t>(std::max(0.0, failure.age_s) * 1000);
    membership_.record_failure(request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>(),
                               std::move(failure), unix_time_ms(),
                               request.value("attempt", proto::AttemptMilestones{}));
    return json::object();
  }
  if (op == "leave") return leave(request);
  if (op == "status") return status(request.value("run_id", std::string()));
  return json{{"error", "unknown meshrun op '" + op + "' (this daemon is meshrun " + std::string(kVersion) + ")"}};
}

json RendezvousService::hello(const StoreConnection& connection) const {
  return proto::Hello{
      .server = proto::kServerName, .version = kVersion, .unix_time_ms = unix_time_ms(), .peer = connection.peer()};
}

json RendezvousService::challenge(StoreConnection& connection) const {
  StoreConnection::JoinAuth& auth = connection.join_auth();
  auth.nonce = proto::make_nonce();
  auth.proven = false;
  return json{{"nonce", auth.nonce}, {"required", !join_token_.empty()}};
}

json RendezvousService::authenticate(StoreConnection& connection, const json& request) const {
  StoreConnection::JoinAuth& auth = connection.join_auth();
  const std::string nonce = std::exchange(auth.nonce, std::string());  // one proof per challenge
  if (join_token_.empty()) return json::object();
  if (nonce.empty()) throw RemoteError("auth without a challenge: ask for one first");
  const std::string client_nonce = request.at("client_nonce").get<std::string>();
  const std::string expected = proto::client_proof(join_token_, nonce, client_nonce);
  if (!equal_constant_time(request.at("proof").get<std::string>(), expected)) {
    throw RemoteError(std::string("the join token does not match this rendezvous' token (check ") + proto::kTokenEnv +
                      " on that node)");
  }
  auth.proven = true;
  return json{{"proof", proto::daemon_proof(join_token_, nonce, client_nonce)}};
}

json RendezvousService::join(const proto::JoinRequest& request) {
  const std::string node_id = membership_.join(request);
  if (!ports_.has_run_port(request.run_id)) workers_store_port(request.run_id, 0);
  spdlog::info("run '{}': {} (pid {}, {} workers) joined as {}", request.run_id, request.host, request.pid,
               request.local_world_size, node_id);
  return json{{"node_id", node_id}, {"round", 0}};
}

std::optional<json> RendezvousService::await(const std::shared_ptr<StoreConnection>& connection, const json& request) {
  const auto run_id = request.at("run_id").get<std::string>();
  const auto node_id = request.at("node_id").get<std::string>();
  const double timeout_s = std::clamp(request.value("timeout_s", kDefaultAwaitSeconds), 0.0, kMaxAwaitSeconds);
  agent_connections_[connection.get()] = {run_id, node_id};
  if (membership_.settled(run_id, node_id) || timeout_s <= 0) return await_reply(*connection, run_id, node_id);
  membership_.set_awaiting(run_id, node_id, true);
  awaits_.push_back({connection, run_id, node_id, clock_.now() + from_seconds(timeout_s)});
  return std::nullopt;
}

void RendezvousService::on_connection_closed(const StoreConnection& connection) {
  const auto it = agent_connections_.find(&connection);
  if (it == agent_connections_.end()) return;
  const auto [run_id, node_id] = it->second;
  agent_connections_.erase(it);
  membership_.connection_closed(run_id, node_id);
  check_awaits(false);
}

json RendezvousService::leave(const json& request) {
  const auto run_id = request.at("run_id").get<std::string>();
  const auto goodput =
      membership_.leave(run_id, request.at("node_id").get<std::string>(), request.value("reason", std::string()),
                        request.value("ok", false), request.value("attempt", proto::AttemptMilestones{}));
  reap_finished_runs();
  if (!goodput) return json::object();
  if (goodput->ended) spdlog::info("run '{}' finished: {}", run_id, proto::describe(*goodput));
  return json{{"goodput", *goodput}};
}

json RendezvousService::status(const std::string& run_id) const { return status_reply(run_id); }

proto::StatusReply RendezvousService::status_reply(const std::string& run_id) const {
  proto::StatusReply reply;
  reply.server = proto::kServerName;
  reply.version = kVersion;
  reply.uptime_s = to_seconds(clock_.now() - started_);
  reply.keys = static_cast<int64_t>(ports_.key_count(""));
  reply.connections = static_cast<int>(ports_.connection_count());
  reply.runs = membership_.status(run_id);
  for (auto& run : reply.runs) run.keys = static_cast<int64_t>(ports_.key_count(run.run_id));
  return reply;
}

json RendezvousService::await_reply(const StoreConnection& connection, const std::string& run_id,
                                    const std::string& node_id) {
  auto reply = membership_.poll(run_id, node_id);
  if (reply.status == proto::AwaitStatus::kAssigned) {
    reply.assignment.master_port = workers_store_port(run_id, reply.assignment.round);
    // The address this agent reached us at is one its workers can reach too.
    if (reply.assignment.master_addr.empty()) reply.assignment.master_addr = connection.local_addr();
  }
  if (reply.status == proto::AwaitStatus::kFailed) spdlog::warn("run '{}': {}", run_id, reply.reason);
  return reply;
}

void RendezvousService::schedule_tick() {
  tick_timer_.expires_after(kTickInterval);
  tick_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    membership_.tick();
    reap_finished_runs();
    check_awaits(true);
    schedule_tick();
  });
}

void RendezvousService::check_awaits(bool include_deadlines) {
  const bool changed = membership_.version() != seen_version_;
  if (!changed && !include_deadlines) return;
  seen_version_ = membership_.version();
  const auto now = clock_.now();
  for (auto it = awaits_.begin(); it != awaits_.end();) {
    auto connection = it->connection.lock();
    if (!connection || !connection->awaiting()) {
      membership_.set_awaiting(it->run_id, it->node_id, false);
      it = awaits_.erase(it);
      continue;
    }
    const bool due = include_deadlines && now >= it->deadline;
    if ((changed && membership_.settled(it->run_id, it->node_id)) || due) {
      membership_.set_awaiting(it->run_id, it->node_id, false);
      const json reply = await_reply(*connection, it->run_id, it->node_id);
      it = awaits_.erase(it);
      connection->finish_await(reply);
    } else {
      ++it;
    }
  }
}

void RendezvousService::reap_finished_runs() {
  for (const auto& run_id : membership_.take_finished_runs()) {
    store_rounds_.erase(run_id);
    if (ports_.close_run_port(run_id)) spdlog::info("run '{}' finished: its store port is closed", run_id);
  }
}

uint16_t RendezvousService::workers_store_port(const std::string& run_id, int64_t round) {
  const auto it = store_rounds_.find(run_id);
  if (it == store_rounds_.end() || it->second != round) {
    // Workers of the last round still connected keep their own store until they go.
    ports_.close_run_port(run_id);
    const uint16_t port = ports_.open_run_port(run_id);
    membership_.set_master_port(run_id, port);
    store_rounds_[run_id] = round;
    spdlog::info("run '{}' round {}: workers' store on port {}", run_id, round, port);
  }
  return static_cast<uint16_t>(membership_.master_port(run_id));
}

}  // namespace meshrun::rendezvous

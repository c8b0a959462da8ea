// RendezvousService: the rendezvous side of the daemon. It answers MESHRUN requests (hello, join, await,
// heartbeat, fail, leave, status) against Membership, parks awaits until their round settles or their
// deadline passes, and ticks the membership deadlines. It sees the network only through RunPorts (each
// run's store port, counts for status) and the StoreConnection of the request. Runs on the io thread.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/clock.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/meshrun_handler.hpp"
#include "rendezvous/run_ports.hpp"
#include "rendezvous/store_connection.hpp"

namespace meshrun::rendezvous {

class RendezvousService final : public MeshrunHandler {
 public:
  /// Starts ticking the membership deadlines on `io`; `ports` must outlive this service. A non-empty
  /// `join_token` makes every rendezvous op but hello, challenge, auth and status need its proof.
  RendezvousService(boost::asio::io_context& io, RunPorts& ports, std::string join_token = "");
  RendezvousService(const RendezvousService&) = delete;
  RendezvousService& operator=(const RendezvousService&) = delete;

  std::optional<nlohmann::json> handle(const std::shared_ptr<StoreConnection>& connection,
                                       const nlohmann::json& request) override;
  void on_connection_closed(const StoreConnection& connection) override;
  /// Stops the tick (shutdown).
  void stop() { tick_timer_.cancel(); }
  /// Every run (or one), what the `status` op answers; the HTTP live view reads it too.
  proto::StatusReply status_reply(const std::string& run_id = "") const;

 private:
  /// A client blocked in an "await" until its round settles or its deadline passes.
  struct PendingAwait {
    std::weak_ptr<StoreConnection> connection;
    std::string run_id;
    std::string node_id;
    TimePoint deadline;
  };

  std::optional<nlohmann::json> dispatch(const std::string& op, const std::shared_ptr<StoreConnection>& connection,
                                         const nlohmann::json& request);
  nlohmann::json hello(const StoreConnection& connection) const;
  /// The join token's challenge-response (proto/rendezvous/join_auth.hpp).
  nlohmann::json challenge(StoreConnection& connection) const;
  nlohmann::json authenticate(StoreConnection& connection, const nlohmann::json& request) const;
  nlohmann::json join(const proto::JoinRequest& request);
  std::optional<nlohmann::json> await(const std::shared_ptr<StoreConnection>& connection,
                                      const nlohmann::json& request);
  nlohmann::json leave(const nlohmann::json& request);
  nlohmann::json status(const std::string& run_id) const;
  nlohmann::json await_reply(const StoreConnection& connection, const std::string& run_id, const std::string& node_id);
  void schedule_tick();
  /// Answers the parked awaits whose round settled (and, with `include_deadlines`, those past due).
  void check_awaits(bool include_deadlines);
  void reap_finished_runs();
  /// The port of the workers' store for the run's `round`: a fresh store (empty, on a new port) each round,
  /// as torchrun makes one per attempt, so no worker reads a key a previous attempt left behind.
  uint16_t workers_store_port(const std::string& run_id, int64_t round);

  RunPorts& ports_;
  std::string join_token_;  // empty: no proof needed
  SteadyClock clock_;
  Membership membership_{clock_};
  std::list<PendingAwait> awaits_;
  // The connection each agent awaits on (run, node id), held open while its agent lives: when it closes,
  // the agent is gone (killed, or its host), and a new round does not wait for it.
  std::map<const StoreConnection*, std::pair<std::string, std::string>> agent_connections_;
  std::map<std::string, int64_t> store_rounds_;  // run -> the round its open workers' store serves
  uint64_t seen_version_ = 0;                    // membership version check_awaits() last looked at
  boost::asio::steady_timer tick_timer_;
  TimePoint started_ = clock_.now();
};

}  // namespace meshrun::rendezvous

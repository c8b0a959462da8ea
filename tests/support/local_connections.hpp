// Store connections with no network: a host that keeps the registry of parked waits (as StoreServer does) and
// transports that keep what the connection delivers. The store protocol's unit tests and its fuzzer drive
// StoreConnection through these.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store_connection.hpp"

namespace meshrun::testing {

/// A transport that keeps every reply; `unsent` stands for bytes a slow network has not taken yet.
struct RecordingTransport final : rendezvous::ConnectionTransport {
  std::string sent;
  size_t unsent = 0;
  bool hung_up = false;
  std::string last;

  void deliver(std::string& replies) override {
    sent += replies;
    replies.clear();
  }
  size_t unsent_bytes() const override { return unsent; }
  void hang_up(const std::string& last_replies) override {
    hung_up = true;
    last = last_replies;
  }
};

/// The daemon's side of the connections, without sockets: waits by id, meshrun requests answered by
/// echoing them back ({"op":"await"} parks until finish_await), closes counted.
class LocalHost final : public rendezvous::ConnectionHost {
 public:
  explicit LocalHost(proto::Limits limits = {}) : limits_(limits) {}

  /// A connection to `store` from `address`, carried by `transport` (which must outlive it).
  std::shared_ptr<rendezvous::StoreConnection> connect(rendezvous::ConnectionTransport& transport,
                                                       const std::shared_ptr<rendezvous::KvStore>& store,
                                                       const std::string& address = "127.0.0.1") {
    return std::make_shared<rendezvous::StoreConnection>(
        *this, transport, store, rendezvous::ConnectionPeer{address + ":4000", address, "127.0.0.1"}, true);
  }

  void wake(const std::vector<rendezvous::WaitId>& ids) override {
    for (const auto id : ids) {
      const auto it = waits_.find(id);
      if (it == waits_.end()) continue;
      auto connection = it->second.lock();
      waits_.erase(it);
      if (connection) connection->wake();
    }
  }
  rendezvous::WaitId register_wait(const std::shared_ptr<rendezvous::StoreConnection>& connection,
                                   size_t /*keys*/) override {
    waits_[next_] = connection;
    return next_++;
  }
  void forget_wait(rendezvous::WaitId id) override { waits_.erase(id); }
  std::optional<nlohmann::json> handle_meshrun(const std::shared_ptr<rendezvous::StoreConnection>& connection,
                                               const nlohmann::json& request) override {
    if (request.value("op", "") == "await") {
      awaiting.push_back(connection);
      return std::nullopt;
    }
    return nlohmann::json{{"echo", request}};
  }
  void on_closed(const std::shared_ptr<rendezvous::StoreConnection>& /*connection*/) override { ++closed; }
  const proto::Limits& limits() const override { return limits_; }

  size_t parked() const { return waits_.size(); }

  std::vector<std::shared_ptr<rendezvous::StoreConnection>> awaiting;
  int closed = 0;

 private:
  proto::Limits limits_;
  std::map<rendezvous::WaitId, std::weak_ptr<rendezvous::StoreConnection>> waits_;
  rendezvous::WaitId next_ = 1;
};

}  // namespace meshrun::testing

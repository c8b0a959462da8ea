// An in-process meshrun-rendezvous on 127.0.0.1:0 for tests, and a client factory for it.
#pragma once

#include <memory>

#include "proto/rendezvous/rendezvous_client.hpp"
#include "proto/store/store_client.hpp"
#include "rendezvous/server.hpp"

namespace meshrun::testing {

class TestDaemon {
 public:
  explicit TestDaemon(rendezvous::ServerOptions options = default_options())
      : server_(std::make_unique<rendezvous::Server>(options)) {
    server_->start_background();
  }
  static rendezvous::ServerOptions default_options() {
    rendezvous::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }
  Endpoint endpoint() const { return Endpoint{"127.0.0.1", server_->port()}; }
  proto::StoreClient client(Duration op_timeout = std::chrono::seconds(10)) const {
    proto::ConnectOptions o;
    o.connect_timeout = std::chrono::seconds(5);
    o.op_timeout = op_timeout;
    return proto::StoreClient::connect(endpoint(), o);
  }
  proto::RendezvousClient rendezvous() const { return proto::RendezvousClient(client()); }
  void stop() { server_->stop(); }

 private:
  std::unique_ptr<rendezvous::Server> server_;
};

}  // namespace meshrun::testing

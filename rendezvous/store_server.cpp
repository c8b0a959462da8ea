#include "rendezvous/store_server.hpp"
#include "rendezvous/net/listen_socket.hpp"

#include <spdlog/spdlog.h>

#include "common/endpoint.hpp"
#include "common/error.hpp"

namespace meshrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

StoreServer::StoreServer(asio::io_context& io, const ServerOptions& options) : io_(io), options_(options) {
  for (const auto& rule : options.allow) allow_.push_back(Cidr::parse(rule));
  main_ = std::make_shared<Listener>(io_, "");
  bind(*main_, options.host, options.port);
  port_ = main_->acceptor.local_endpoint().port();
}

void StoreServer::start(MeshrunHandler& meshrun) {
  meshrun_ = &meshrun;
  accept(main_);
}

void StoreServer::close() {
  meshrun_ = nullptr;  // a shutdown's closes are not clients going away
  boost::system::error_code ec;
  main_->acceptor.close(ec);
  for (auto& [id, listener] : run_listeners_) listener->acceptor.close(ec);
  auto sessions = sessions_;  // closing a connection erases it from sessions_
  for (const auto& [connection, session] : sessions) session->connection()->close("");
}

void StoreServer::bind(Listener& listener, const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw UsageError("cannot resolve listen address '" + host + "': " + ec.message() +
                     " (use an IP address such as 0.0.0.0 or 127.0.0.1)");
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  open_listen_socket(listener.acceptor, ep, ec);
  if (ec) {
    const std::string fix =
        ec == asio::error::address_in_use
            ? " (another process uses this port: pick another with --port, or --port 0 for a free one)"
            : "";
    const std::string message = "cannot listen on " + Endpoint{host, port}.to_string() + ": " + ec.message() + fix;
    if (ec == asio::error::address_in_use) throw AddressInUseError(message);
    throw NetworkError(message);
  }
}

void StoreServer::accept(const std::shared_ptr<Listener>& listener) {
  listener->acceptor.async_accept([this, listener](boost::system::error_code ec, tcp::socket socket) {
    if (!listener->acceptor.is_open()) return;
    if (ec) {
      accept_after_error(listener, ec);
      return;
    }
    out_of_descriptors_ = false;
    admit(listener, std::move(socket));
    accept(listener);
  });
}

void StoreServer::admit(const std::shared_ptr<Listener>& listener, tcp::socket socket) {
  boost::system::error_code peer_ec;
  const auto remote = socket.remote_endpoint(peer_ec);
  const std::string address = peer_ec ? "?" : address_text(remote.address());
  PeerLoad& load = load_[address];
  const size_t cap = options_.limits.max_connections_per_peer;
  if (cap != 0 && load.connections >= cap) {
    if (!load.refusing) {
      spdlog::warn(
          "{} holds {} connections, the most one address may (--max-connections-per-peer): its next ones "
          "are closed until it closes some",
          address, load.connections);
    }
    load.refusing = true;
    return;  // the socket closes here
  }
  ++load.connections;
  const bool ok = !peer_ec && allowed(allow_, address);
  auto session = std::make_shared<Session>(std::move(socket), *this, listener, ok);
  sessions_.emplace(session->connection().get(), session);
  session->start();
}

void StoreServer::accept_after_error(const std::shared_ptr<Listener>& listener, const boost::system::error_code& ec) {
  const bool starved = ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
                       ec == asio::error::no_memory || ec.value() == ENFILE;
  if (!starved) {
    if (ec != asio::error::operation_aborted) spdlog::warn("accept failed: {}", ec.message());
    accept(listener);
    return;
  }
  if (!out_of_descriptors_) {
    spdlog::warn(
        "accept failed: {}; new connections wait while the daemon is out of descriptors (raise its "
        "open-files limit, ulimit -n, or find the client that holds them: status lists them)",
        ec.message());
  }
  out_of_descriptors_ = true;
  auto pause = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
  pause->async_wait([this, listener, pause](const boost::system::error_code&) {
    if (listener->acceptor.is_open()) accept(listener);
  });
}

WaitId StoreServer::register_wait(const std::shared_ptr<StoreConnection>& connection, size_t keys) {
  PeerLoad& load = load_[connection->peer_address()];
  const size_t cap = options_.limits.max_waited_keys_per_peer;
  if (cap != 0 && (keys > cap || load.waited_keys > cap - keys)) return kNoWait;
  load.waited_keys += keys;
  const WaitId id = next_wait_id_++;
  waits_[id] = ParkedWait{connection, connection->peer_address(), keys};
  return id;
}

void StoreServer::forget_wait(WaitId id) {
  const auto it = waits_.find(id);
  if (it == waits_.end()) return;
  release_wait(it->second);
  waits_.erase(it);
}

void StoreServer::release_wait(const ParkedWait& wait) {
  const auto it = load_.find(wait.peer_address);
  if (it == load_.end()) return;
  it->second.waited_keys -= std::min(it->second.waited_keys, wait.keys);
  if (it->second.connections == 0 && it->second.waited_keys == 0) load_.erase(it);
}

void StoreServer::wake(const std::vector<WaitId>& ids) {
  for (WaitId id : ids) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    auto connection = it->second.connection.lock();
    release_wait(it->second);
    waits_.erase(it);
    if (connection) connection->wake();
  }
}

std::optional<nlohmann::json> StoreServer::handle_meshrun(const std::shared_ptr<StoreConnection>& connection,
                                                          const nlohmann::json& request) {
  return meshrun_->handle(connection, request);
}

void StoreServer::on_closed(const std::shared_ptr<StoreConnection>& connection) {
  sessions_.erase(connection.get());
  if (const auto it = load_.find(connection->peer_address()); it != load_.end()) {
    it->second.connections -= std::min<size_t>(it->second.connections, 1);
    it->second.refusing = false;
    if (it->second.connections == 0 && it->second.waited_keys == 0) load_.erase(it);
  }
  if (meshrun_ != nullptr) meshrun_->on_connection_closed(*connection);
}

uint16_t StoreServer::open_run_port(const std::string& run_id) {
  auto listener = std::make_shared<Listener>(io_, run_id);
  bind(*listener, options_.host, 0);
  accept(listener);
  run_listeners_[run_id] = listener;
  return listener->acceptor.local_endpoint().port();
}

bool StoreServer::close_run_port(const std::string& run_id) {
  auto it = run_listeners_.find(run_id);
  if (it == run_listeners_.end()) return false;
  boost::system::error_code ec;
  it->second->acceptor.close(ec);
  run_listeners_.erase(it);
  return true;
}

size_t StoreServer::key_count(const std::string& run_id) const {
  if (run_id.empty()) return main_->store.size();
  auto it = run_listeners_.find(run_id);
  return it == run_listeners_.end() ? 0 : it->second->store.size();
}

}  // namespace meshrun::rendezvous

// StoreServer: the daemon's network layer. It listens on the main port and on one private port per run,
// accepts connections (applying --allow), owns the sessions and the registry of parked waits, and hands
// MESHRUN requests to a MeshrunHandler (the rendezvous service), which reaches back only through RunPorts.
// Everything here runs on the io thread, so it needs no locks.
#pragma once

#include "rendezvous/session.hpp"  // first Asio include (it orders <utility> before Asio)

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/listener.hpp"
#include "rendezvous/meshrun_handler.hpp"
#include "rendezvous/net/cidr.hpp"
#include "rendezvous/run_ports.hpp"
#include "rendezvous/server_options.hpp"

namespace meshrun::rendezvous {

class StoreServer final : public SessionHost, public RunPorts {
 public:
  /// Binds the main port at once, so port() is valid and a bind error throws here.
  StoreServer(boost::asio::io_context& io, const ServerOptions& options);
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// Starts accepting; MESHRUN requests go to `meshrun`, which must outlive this server.
  void start(MeshrunHandler& meshrun);
  /// Closes every port and connection (shutdown).
  void close();
  uint16_t port() const { return port_; }

  // --- SessionHost: called by sessions ---
  void wake(const std::vector<WaitId>& ids) override;
  WaitId register_wait(const std::shared_ptr<Session>& session) override;
  void forget_wait(WaitId id) override { waits_.erase(id); }
  std::optional<nlohmann::json> handle_meshrun(const std::shared_ptr<Session>& session,
                                               const nlohmann::json& request) override;
  void on_closed(const std::shared_ptr<Session>& session) override;
  const proto::Limits& limits() const override { return options_.limits; }

  // --- RunPorts: called by the rendezvous service ---
  bool has_run_port(const std::string& run_id) const override { return run_listeners_.count(run_id) != 0; }
  uint16_t open_run_port(const std::string& run_id) override;
  bool close_run_port(const std::string& run_id) override;
  size_t key_count(const std::string& run_id) const override;
  size_t connection_count() const override { return sessions_.size(); }

 private:
  void bind(Listener& listener, const std::string& host, uint16_t port);
  void accept(const std::shared_ptr<Listener>& listener);

  boost::asio::io_context& io_;
  ServerOptions options_;
  std::vector<Cidr> allow_;
  MeshrunHandler* meshrun_ = nullptr;  // set by start()
  std::shared_ptr<Listener> main_;
  std::map<std::string, std::shared_ptr<Listener>> run_listeners_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::unordered_map<WaitId, std::weak_ptr<Session>> waits_;  // parked WAITs and BARRIERs, by id
  WaitId next_wait_id_ = 1;
  uint16_t port_ = 0;
};

}  // namespace meshrun::rendezvous

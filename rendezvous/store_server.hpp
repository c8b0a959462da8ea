// StoreServer: the daemon's network layer. It listens on the main port and on one private port per run,
// accepts connections (applying --allow and the per-address caps), owns them (each a StoreConnection carried
// by an Asio Session) and the registry of parked waits, and hands MESHRUN requests to a MeshrunHandler (the
// rendezvous service), which reaches back only through RunPorts.
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

class StoreServer final : public ConnectionHost, public RunPorts {
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

  // --- ConnectionHost: called by the connections ---
  void wake(const std::vector<WaitId>& ids) override;
  WaitId register_wait(const std::shared_ptr<StoreConnection>& connection, size_t keys) override;
  void forget_wait(WaitId id) override;
  std::optional<nlohmann::json> handle_meshrun(const std::shared_ptr<StoreConnection>& connection,
                                               const nlohmann::json& request) override;
  void on_closed(const std::shared_ptr<StoreConnection>& connection) override;
  const proto::Limits& limits() const override { return options_.limits; }

  // --- RunPorts: called by the rendezvous service ---
  bool has_run_port(const std::string& run_id) const override { return run_listeners_.count(run_id) != 0; }
  uint16_t open_run_port(const std::string& run_id) override;
  bool close_run_port(const std::string& run_id) override;
  size_t key_count(const std::string& run_id) const override;
  size_t connection_count() const override { return sessions_.size(); }

 private:
  struct ParkedWait {
    std::weak_ptr<StoreConnection> connection;
    std::string peer_address;
    size_t keys = 0;
  };
  // What each client address holds now (proto::Limits' per-peer caps).
  struct PeerLoad {
    size_t connections = 0;
    size_t waited_keys = 0;
    bool refusing = false;  // at its connection cap, and said so: said again once it went below
  };

  void bind(Listener& listener, const std::string& host, uint16_t port);
  void accept(const std::shared_ptr<Listener>& listener);
  /// Starts serving an accepted connection, unless its address holds as many as it may (closed, and said once).
  void admit(const std::shared_ptr<Listener>& listener, boost::asio::ip::tcp::socket socket);
  /// The next accept after `ec` failed: at once, or after a pause when the process is out of descriptors (an
  /// accept retried at once would fail again, in a loop).
  void accept_after_error(const std::shared_ptr<Listener>& listener, const boost::system::error_code& ec);
  /// A parked wait is over (woken, cancelled, or its connection gone): its keys no longer count for its address.
  void release_wait(const ParkedWait& wait);

  boost::asio::io_context& io_;
  ServerOptions options_;
  std::vector<Cidr> allow_;
  MeshrunHandler* meshrun_ = nullptr;  // set by start()
  std::shared_ptr<Listener> main_;
  std::map<std::string, std::shared_ptr<Listener>> run_listeners_;
  // The transports of the open connections, by their connection (whose on_closed removes it).
  std::unordered_map<const StoreConnection*, std::shared_ptr<Session>> sessions_;
  std::unordered_map<WaitId, ParkedWait> waits_;  // parked WAITs and BARRIERs, by id
  std::unordered_map<std::string, PeerLoad> load_;
  bool out_of_descriptors_ = false;  // said once until an accept succeeds again
  WaitId next_wait_id_ = 1;
  uint16_t port_ = 0;
};

}  // namespace meshrun::rendezvous

// PeerServer: the agent's copy port. Other agents push their ranks' copies here (this node is their buddy)
// and fetch the copies this node holds (a spare restoring a lost node's ranks). A few threads, each serving one
// connection at a time, so a silent stranger (closed after the handshake's deadline) or a slow transfer does not
// hold up the others; one request per connection (peer_link.hpp), each read with a deadline. A request that
// does not prove the run's secret (and the join token, when the run has one: peer_auth.hpp), of another run,
// or of an unknown op is refused with a bare "refused": nothing a stranger could use in its next request.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/poly1305.hpp"
#include "common/unique_fd.hpp"
#include "proto/agents/copy_port_messages.hpp"

namespace meshrun::launcher {

class MemoryKeeper;

class PeerServer {
 public:
  /// Connections served at once; more wait in the listen queue.
  static constexpr int kConcurrentConnections = 4;

  /// Listens on `addr` (a numeric address of this host: the one the job's collectives use), on a port the
  /// kernel picks. Throws meshrun::Error naming the address when it cannot.
  PeerServer(MemoryKeeper& keeper, const std::string& addr);
  /// Cuts the connections being served and joins the threads. Never call it holding the keeper's lock: a
  /// connection being served may be waiting for it.
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void handle(int socket);
  /// The push's bytes into the replica slot the keeper gives, then its verdict; the fetch's copy out.
  void serve_push(const proto::CopyPortRequest& request, const Poly1305Key& key, int socket);
  void serve_fetch(const proto::CopyPortRequest& request, const Poly1305Key& key, int socket);
  /// Records a connection being served; false when the server is stopping (the connection is dropped).
  bool track(int socket);
  void untrack(int socket);

  MemoryKeeper& keeper_;
  int port_ = 0;  // before listen_: set while listen_ is made
  UniqueFd listen_;
  std::string target_;  // addr:port, as this agent publishes it: what a proof must name
  UniqueFd wake_;
  std::mutex mutex_;
  std::set<int> serving_;  // sockets being served, shut down when the server stops
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace meshrun::launcher

// PeerServer: the agent's copy port. Other agents push their ranks' copies here (this node is their buddy)
// and fetch the copies this node holds (a spare restoring a lost node's ranks). One thread, one request per
// connection (peer_link.hpp), each read with a deadline. A request that does not prove the run's secret (and
// the join token, when the run has one: peer_auth.hpp), of another run, or of an unknown op is refused with
// a bare "refused": nothing a stranger could use in its next request.
#pragma once

#include <thread>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

class MemoryKeeper;

class PeerServer {
 public:
  /// Listens on `addr` (a numeric address of this host: the one the job's collectives use), on a port the
  /// kernel picks. Throws meshrun::Error naming the address when it cannot.
  PeerServer(MemoryKeeper& keeper, const std::string& addr);
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();
  void handle(int socket);

  MemoryKeeper& keeper_;
  int port_ = 0;  // before listen_: set while listen_ is made
  UniqueFd listen_;
  std::string target_;  // addr:port, as this agent publishes it: what a proof must name
  UniqueFd wake_;
  std::thread thread_;
};

}  // namespace meshrun::launcher

// PeerServer: the agent's copy port. Other agents push their ranks' copies here (this node is their buddy)
// and fetch the copies this node holds (a spare restoring a lost node's ranks). One thread, one request per
// connection (peer_link.hpp), each read with a deadline; requests of another run, or without the run's join
// token when it has one (peer_auth.hpp), are refused.
#pragma once

#include <thread>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

class MemoryKeeper;

class PeerServer {
 public:
  /// Listens on every address, on a port the kernel picks.
  explicit PeerServer(MemoryKeeper& keeper);
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
  UniqueFd wake_;
  std::thread thread_;
};

}  // namespace meshrun::launcher

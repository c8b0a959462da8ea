// PeerSocket and PeerListener: the TCP sockets of the pairwise bandwidth test (node <-> node, not the
// daemon). Non-blocking descriptors driven by poll(), so every read, write and accept ends by a
// deadline; a deadline that passes throws TimeoutError naming the peer and what was being waited for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.hpp"
#include "common/endpoint.hpp"
#include "common/unique_fd.hpp"

namespace meshrun::diagnostics {

class PeerSocket {
 public:
  /// Takes a connected descriptor; `peer` ("#2 node2 10.0.0.3:40123") names it in errors.
  PeerSocket(UniqueFd fd, std::string peer);

  /// Connects to `endpoint` before `deadline`; throws proto::ConnectError (refused, timeout, unreachable...).
  static PeerSocket connect(const Endpoint& endpoint, std::string peer, TimePoint deadline);

  /// Sends every byte before `deadline`, or throws (TimeoutError, NetworkError when the peer goes away).
  void send_all(const void* data, size_t size, TimePoint deadline);
  /// Receives exactly `size` bytes before `deadline`, or throws.
  void recv_all(void* data, size_t size, TimePoint deadline);

  const std::string& peer() const { return peer_; }
  /// Renames the peer for later messages (once its hello said who it is).
  void set_peer(std::string peer) { peer_ = std::move(peer); }

 private:
  void wait_ready(short events, TimePoint deadline, const char* what);

  UniqueFd fd_;
  std::string peer_;
};

class PeerListener {
 public:
  /// Listens on every address of `family` (AF_INET or AF_INET6), on a port the kernel picks.
  explicit PeerListener(int family);

  uint16_t port() const { return port_; }
  /// The next incoming connection, or throws TimeoutError at `deadline`.
  PeerSocket accept(TimePoint deadline);

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
};

}  // namespace meshrun::diagnostics

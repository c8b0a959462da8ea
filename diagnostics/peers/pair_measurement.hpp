// The exchange between the two nodes of one pair, on one TCP connection from a (lower index, client)
// to b's listener (server):
//
//   a -> b  hello {magic, session tag, round, a, b}      b -> a  accept byte (stray connections are closed)
//   a <-> b pings: 8 bytes there and back, `pings` times (round-trip latency, TCP_NODELAY)
//   a -> b  frames [u32 length][bytes] until `bytes` sent or `max_transfer` elapsed, then [u32 0];
//           b -> a  u64 bytes received                     (a times it: a -> b throughput)
//   b -> a  the same the other way                         (b times it: b -> a throughput)
//   a <-> b each end's figures, so both can report the whole pair
//
// Every step is bounded by the deadline given; a failure throws and the caller reports the pair as failed.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.hpp"
#include "diagnostics/peers/peer_matrix.hpp"
#include "diagnostics/peers/peer_socket.hpp"

namespace meshrun::diagnostics {

struct PairSpec {
  uint64_t session_tag = 0;  // session_tag(session id): a connection from another session is not ours
  int round = 0;
  int a = 0;                                        // client's session index
  int b = 0;                                        // server's session index
  uint64_t bytes = 256ull << 20;                    // per direction, at most
  Duration max_transfer = std::chrono::seconds(2);  // per direction, at most
  int pings = 100;
};

/// Stable 64-bit tag of a session id (FNV-1a), the same on every node.
uint64_t session_tag(const std::string& session);

/// The client's side: sends the hello, then measures. Throws meshrun::Error when the peer fails.
PairResult run_pair_client(PeerSocket& socket, const PairSpec& spec, TimePoint deadline);

/// Reads a hello (bounded by `deadline`); true and acknowledged when it is the one `spec` expects.
bool accept_pair_hello(PeerSocket& socket, const PairSpec& spec, TimePoint deadline);

/// The server's side after accept_pair_hello returned true. Throws meshrun::Error when the peer fails.
PairResult run_pair_server(PeerSocket& socket, const PairSpec& spec, TimePoint deadline);

}  // namespace meshrun::diagnostics

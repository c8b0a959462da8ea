// The agents' copy transfer (docs/design/in-memory-checkpoints.md, "Agent to agent"): one TCP connection
// per request, a frame (uint32 little-endian length, at most 64 KiB, then a JSON object: the messages of
// proto/copy_port_messages.hpp) each way, and a copy's bytes straight from one memfd to the other (sendfile
// out; received into a mapping). Every call has a deadline, so a peer that stops answering costs a bounded wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

inline constexpr std::chrono::seconds kPeerTimeout{20};

/// Connects to an agent's copy port; throws meshrun::Error naming it.
UniqueFd connect_peer(const std::string& addr, int port);
/// Send and receive deadlines on a connected socket.
void set_peer_deadlines(int socket);
/// How long an accepted connection may take to prove its request: a stranger holds the copy port no longer.
inline constexpr std::chrono::seconds kHandshakeTimeout{5};
void set_handshake_deadline(int socket);
void send_frame(int socket, const nlohmann::json& message);
/// Throws meshrun::Error when the peer closes, times out or sends more than the limit.
nlohmann::json receive_frame(int socket);
/// Bytes [from, bytes) of `memfd` to the socket.
void send_copy(int socket, int memfd, uint64_t bytes, uint64_t from = 0);
/// `bytes` from the socket into the start of `memfd` (which holds at least that many).
void receive_copy(int socket, int memfd, uint64_t bytes);

}  // namespace meshrun::launcher

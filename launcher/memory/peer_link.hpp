// The agents' copy transfer (docs/design/in-memory-checkpoints.md, "Agent to agent"): one TCP connection
// per request, a frame (uint32 little-endian length, at most 64 KiB, then a JSON object: the messages of
// proto/agents/copy_port_messages.hpp) each way, and a copy's bytes from one memfd's mapping to the other's, followed
// by their Poly1305 tag. Every call has a deadline, so a peer that stops answering costs a bounded wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/poly1305.hpp"
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
/// Bytes [from, to) of `memfd` to the socket, each given to `mac` as it is sent (the bytes tagged are the bytes
/// sent). A copy's last piece is followed by send_copy_tag.
void send_copy(int socket, int memfd, uint64_t to, Poly1305& mac, uint64_t from = 0);
/// The tag of every byte given to `mac`, as the frame that ends a copy (proto::CopyPortTag).
void send_copy_tag(int socket, Poly1305& mac);
/// `bytes` from the socket into the start of `memfd` (which holds at least that many), then the sender's tag.
/// Throws meshrun::Error when the tag does not match the bytes received: changed on the way.
void receive_copy(int socket, int memfd, uint64_t bytes, Poly1305& mac);

}  // namespace meshrun::launcher

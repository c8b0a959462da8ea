// The agents' copy port proves the run's secret both ways (docs/security.md): a copy holds a rank's weights
// and optimizer state, so neither end deals with a party that cannot prove it joined the run. The key is the
// run's secret (proto::Assignment::run_secret, told only to agents that joined), with the join token
// (MESHRUN_RDZV_TOKEN) added when the run has one. A challenge-response folded into the one request of a
// connection; the key itself never travels, and each proof covers the request and its target:
//
//   agent -> CopyPortChallenge {Na}                             (on accept)
//   peer  -> the CopyPortRequest, with client_nonce Np and proof copy_proof(K, "peer", Na, Np, T, request)
//   agent -> CopyPortProof {copy_proof(K, "agent", Na, Np, T, request)} | refused, then the request's replies
//
// T is the copy port the peer meant to reach, addr:port as that agent published it (in an inventory signed with
// K: inventory_exchange.hpp). A relay (a party that points a peer at itself and passes the handshake on to the
// real agent) fails: the real agent's own T differs from the one the peer proved, and a request changed on the
// way no longer matches its proof. The copy's bytes carry a Poly1305 tag under a key drawn from K and both nonces
// (copy_data_key): fresh for each connection, so a tag is never reused, and a byte changed on the network path is
// caught before the copy is kept or lent.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/poly1305.hpp"
#include "common/unique_fd.hpp"
#include "proto/agents/copy_port_messages.hpp"

namespace meshrun::launcher {

/// What the copy port answers a request it refuses, as a frame.
inline const nlohmann::json kRefused = proto::CopyPortReply::refused();

/// A proven connection: its socket, and the one-time key of the copy bytes it carries (one copy, one way).
struct PeerConnection {
  UniqueFd socket;
  Poly1305Key data_key{};
  int get() const { return socket.get(); }
};

/// Connects to the agent at addr:port and sends `request`, proven with `key`, and checks the agent's proof.
/// The socket is then ready for the request's first reply. Throws meshrun::Error naming why not (an empty
/// key: this agent has not joined a round yet).
PeerConnection open_peer_request(const std::string& addr, int port, const std::string& key,
                                 proto::CopyPortRequest request);

/// The proof of one side: HMAC-SHA256 with `key` over the role, both nonces, the target and the request's fields
/// (its own proof and nonce aside).
std::string copy_proof(const std::string& key, const char* role, const std::string& agent_nonce,
                       const std::string& client_nonce, const std::string& target,
                       const proto::CopyPortRequest& request);

/// The one-time key of a connection's copy bytes: HMAC-SHA256 with `key` over both nonces and the target.
Poly1305Key copy_data_key(const std::string& key, const std::string& agent_nonce, const std::string& client_nonce,
                          const std::string& target);

/// "addr:port" as a copy port's target is named in proofs.
std::string copy_port_target(const std::string& addr, int port);

/// A request whose proof held, and the key of the copy bytes its connection carries.
struct ProvenRequest {
  proto::CopyPortRequest request;
  Poly1305Key data_key{};
};

/// The agent's side, on a connection just accepted: sends the challenge, reads the request, checks its proof
/// and answers with the agent's own. nullopt: refused (kRefused was sent). Throws ProtocolError when the
/// request is malformed.
[[nodiscard]] std::optional<ProvenRequest> accept_peer_request(int socket, const std::string& key,
                                                               const std::string& target);

/// The peer's address, for the log ("10.0.0.2:41234"), or "a peer".
std::string peer_address(int socket);

}  // namespace meshrun::launcher

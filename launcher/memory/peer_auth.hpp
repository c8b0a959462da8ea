// The agents' copy port proves the run's secret both ways (docs/security.md): a copy holds a rank's weights
// and optimizer state, so neither end deals with a party that cannot prove it joined the run. The key is the
// run's secret (proto::Assignment::run_secret, told only to agents that joined), with the join token
// (MESHRUN_RDZV_TOKEN) added when the run has one. The same challenge-response as the rendezvous
// (proto/join_auth.hpp), folded into the one request of a connection; the key itself never travels:
//
//   agent -> {"nonce": Na}                                       (on accept)
//   peer  -> the request, plus {"client_nonce": Np, "proof": client_proof(K, Na, Np)}
//   agent -> {"proof": daemon_proof(K, Na, Np)} | {"error": "refused"}, then the request's replies
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

/// What the copy port answers a request it refuses, whatever the reason: nothing a stranger could use.
inline const nlohmann::json kRefused = {{"error", "refused"}};

/// Connects to the agent at addr:port and sends `request`, proven with `key`, and checks the agent's proof.
/// The socket is then ready for the request's first reply. Throws meshrun::Error naming why not (an empty
/// key: this agent has not joined a round yet).
UniqueFd open_peer_request(const std::string& addr, int port, const std::string& key, nlohmann::json request);

/// The agent's side, on a connection just accepted: sends the hello, reads the request, checks its proof
/// and answers with the agent's own. nullopt: refused (kRefused was sent).
std::optional<nlohmann::json> accept_peer_request(int socket, const std::string& key);

/// The peer's address, for the log ("10.0.0.2:41234"), or "a peer".
std::string peer_address(int socket);

}  // namespace meshrun::launcher

// The join token on the agents' copy port (docs/checkpoints.md, "Copies in memory"): a copy holds a rank's
// weights and optimizer state, so with a token (MESHRUN_RDZV_TOKEN) neither end deals with an agent that
// cannot prove it. The same challenge-response as the rendezvous (proto/join_auth.hpp), folded into the one
// request of a connection; the token itself never travels:
//
//   agent -> {"nonce": Na, "required": true|false}               (on accept)
//   peer  -> the request, plus {"client_nonce": Np, "proof": client_proof(T, Na, Np)} with a token
//   agent -> {"proof": daemon_proof(T, Na, Np)} | {"error": ...}  (with a token), then the request's replies
//
// A peer with a token refuses an agent that requires none (it could not have the token); one without a token
// is refused by an agent that requires one.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {

/// Connects to the agent at addr:port and sends `request`, proven with `token` when it is set (and the
/// agent's proof checked). The socket is then ready for the request's first reply. Throws meshrun::Error
/// naming why not.
UniqueFd open_peer_request(const std::string& addr, int port, const std::string& token, nlohmann::json request);

/// The agent's side, on a connection just accepted: sends the hello, reads the request and, with `token`,
/// checks its proof and answers with the agent's own. nullopt: refused (the refusal was sent).
std::optional<nlohmann::json> accept_peer_request(int socket, const std::string& token);

}  // namespace meshrun::launcher

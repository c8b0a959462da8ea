// The join token's challenge-response on the rendezvous extension (docs/daemon.md#join-token). The token
// itself never travels; each side proves it knows it with an HMAC over both sides' fresh nonces:
//
//   client -> {"op": "challenge"}                      daemon -> {"nonce": Nd, "required": true|false}
//   client -> {"op": "auth", "client_nonce": Nc,       daemon -> {"proof": daemon_proof(T, Nd, Nc)}
//              "proof": client_proof(T, Nd, Nc)}                 or {"error": "... does not match ..."}
//
// Nd is fresh per connection (a recorded proof is worth nothing on another one) and Nc lets the client
// check the daemon's answer (a daemon without the token cannot hand out ranks to a node that has one).
// A daemon that requires a token refuses every rendezvous op but hello, challenge, auth and status on a
// connection that has not proven it. The TCPStore ops stay as PyTorch sends them (--allow guards them).
#pragma once

#include <string>

namespace meshrun::proto {

/// Where the launcher and the daemon take the token from (never from the command line: `ps` shows it).
inline constexpr const char* kTokenEnv = "MESHRUN_RDZV_TOKEN";

/// 32 random hex digits from the system's random source.
std::string make_nonce();
/// 64 random hex digits: a run's secret (proto::Assignment::run_secret), which only agents that joined learn.
std::string make_run_secret();
std::string client_proof(const std::string& token, const std::string& daemon_nonce, const std::string& client_nonce);
std::string daemon_proof(const std::string& token, const std::string& daemon_nonce, const std::string& client_nonce);

}  // namespace meshrun::proto

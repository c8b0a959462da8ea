#include "proto/rendezvous/join_auth.hpp"

#include <cstdio>
#include <random>

#include "common/sha256.hpp"

namespace meshrun::proto {
namespace {

// Distinct labels: a client proof can never be replayed as a daemon proof, or the other way round.
std::string proof(const char* who, const std::string& token, const std::string& daemon_nonce,
                  const std::string& client_nonce) {
  return to_hex(hmac_sha256(token, std::string("meshrun-join-v1 ") + who + " " + daemon_nonce + " " + client_nonce));
}

}  // namespace

std::string make_run_secret() { return make_nonce() + make_nonce(); }

std::string make_nonce() {
  std::random_device source;  // the kernel's random source on Linux
  std::string nonce;
  char part[9];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(part, sizeof part, "%08x", source());
    nonce += part;
  }
  return nonce;
}

std::string client_proof(const std::string& token, const std::string& daemon_nonce, const std::string& client_nonce) {
  return proof("client", token, daemon_nonce, client_nonce);
}

std::string daemon_proof(const std::string& token, const std::string& daemon_nonce, const std::string& client_nonce) {
  return proof("daemon", token, daemon_nonce, client_nonce);
}

}  // namespace meshrun::proto

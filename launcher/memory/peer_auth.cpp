#include "launcher/memory/peer_auth.hpp"

#include <sys/socket.h>

#include "common/error.hpp"
#include "common/net_address.hpp"
#include "common/sha256.hpp"
#include "launcher/memory/peer_link.hpp"
#include "proto/join_auth.hpp"

namespace meshrun::launcher {

using nlohmann::json;

UniqueFd open_peer_request(const std::string& addr, int port, const std::string& key, proto::CopyPortRequest request) {
  const std::string where = "the agent at " + addr + ":" + std::to_string(port);
  if (key.empty()) throw Error("cannot prove this run's secret to " + where + ": this agent has not joined a round");
  UniqueFd peer = connect_peer(addr, port);
  const std::string agent_nonce = receive_frame(peer.get()).get<proto::CopyPortChallenge>().nonce;
  const std::string client_nonce = proto::make_nonce();
  request.client_nonce = client_nonce;
  request.proof = proto::client_proof(key, agent_nonce, client_nonce);
  send_frame(peer.get(), request);
  const auto answer = receive_frame(peer.get()).get<proto::CopyPortProof>();
  if (answer.refused) {
    throw Error(where +
                " refused the request (another run's agent, or another join token: give every agent the "
                "same " +
                std::string(proto::kTokenEnv) + ")");
  }
  if (!equal_constant_time(answer.proof, proto::daemon_proof(key, agent_nonce, client_nonce)))
    throw Error(where + " does not know the run's secret: no copy goes to it or comes from it");
  return peer;
}

std::optional<proto::CopyPortRequest> accept_peer_request(int socket, const std::string& key) {
  const std::string nonce = proto::make_nonce();
  send_frame(socket, proto::CopyPortChallenge{nonce});
  const json frame = receive_frame(socket);
  // The proof first: a stranger learns nothing, not even which of its fields this build reads.
  const auto text_of = [&frame](const char* field) -> std::string {
    if (!frame.is_object()) return "";
    const auto it = frame.find(field);
    return it != frame.end() && it->is_string() ? it->get<std::string>() : "";
  };
  const std::string client_nonce = text_of("client_nonce");
  const std::string proof = text_of("proof");
  if (key.empty() || client_nonce.empty() ||
      !equal_constant_time(proof, proto::client_proof(key, nonce, client_nonce))) {
    send_frame(socket, kRefused);
    return std::nullopt;
  }
  send_frame(socket, proto::CopyPortProof{proto::daemon_proof(key, nonce, client_nonce), false});
  try {
    return frame.get<proto::CopyPortRequest>();
  } catch (const ProtocolError&) {
    send_frame(socket, kRefused);  // a proven peer's request this build cannot read (another version's?)
    throw;
  }
}

std::string peer_address(int socket) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getpeername(socket, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "a peer";
  const std::string host = numeric_address(reinterpret_cast<const sockaddr*>(&addr));
  return host.empty() ? "a peer" : host;
}

}  // namespace meshrun::launcher

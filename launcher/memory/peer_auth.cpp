#include "launcher/memory/peer_auth.hpp"

#include <sys/socket.h>

#include "common/error.hpp"
#include "common/net_address.hpp"
#include "common/sha256.hpp"
#include "launcher/memory/peer_link.hpp"
#include "proto/rendezvous/join_auth.hpp"

namespace meshrun::launcher {

using nlohmann::json;

std::string copy_port_target(const std::string& addr, int port) { return addr + ":" + std::to_string(port); }

std::string copy_proof(const std::string& key, const char* role, const std::string& agent_nonce,
                       const std::string& client_nonce, const std::string& target,
                       const proto::CopyPortRequest& request) {
  proto::CopyPortRequest fields = request;
  fields.client_nonce.clear();
  fields.proof.clear();
  const std::string message = std::string("meshrun-copy-port|") + role + "|" + agent_nonce + "|" + client_nonce + "|" +
                              target + "|" + json(fields).dump();
  return to_hex(hmac_sha256(key, message));
}

Poly1305Key copy_data_key(const std::string& key, const std::string& agent_nonce, const std::string& client_nonce,
                          const std::string& target) {
  return hmac_sha256(key, "meshrun-copy-data|" + agent_nonce + "|" + client_nonce + "|" + target);
}

PeerConnection open_peer_request(const std::string& addr, int port, const std::string& key,
                                 proto::CopyPortRequest request) {
  const std::string where = "the agent at " + addr + ":" + std::to_string(port);
  if (key.empty()) throw Error("cannot prove this run's secret to " + where + ": this agent has not joined a round");
  UniqueFd peer = connect_peer(addr, port);
  const std::string agent_nonce = receive_frame(peer.get()).get<proto::CopyPortChallenge>().nonce;
  const std::string client_nonce = proto::make_nonce();
  const std::string target = copy_port_target(addr, port);
  request.client_nonce = client_nonce;
  request.proof = copy_proof(key, "peer", agent_nonce, client_nonce, target, request);
  send_frame(peer.get(), request);
  const auto answer = receive_frame(peer.get()).get<proto::CopyPortProof>();
  if (answer.refused) {
    throw Error(where +
                " refused the request (another run's agent, or another join token: give every agent the "
                "same " +
                std::string(proto::kTokenEnv) + ")");
  }
  if (!equal_constant_time(answer.proof, copy_proof(key, "agent", agent_nonce, client_nonce, target, request)))
    throw Error(where + " does not know the run's secret: no copy goes to it or comes from it");
  return PeerConnection{std::move(peer), copy_data_key(key, agent_nonce, client_nonce, target)};
}

std::optional<ProvenRequest> accept_peer_request(int socket, const std::string& key, const std::string& target) {
  const std::string nonce = proto::make_nonce();
  send_frame(socket, proto::CopyPortChallenge{nonce});
  const json frame = receive_frame(socket);
  proto::CopyPortRequest request;
  try {
    request = frame.get<proto::CopyPortRequest>();
  } catch (const ProtocolError&) {
    send_frame(socket, kRefused);  // unreadable (a stranger's, or another version's): nothing said about why
    throw;
  }
  if (key.empty() || request.client_nonce.empty() ||
      !equal_constant_time(request.proof, copy_proof(key, "peer", nonce, request.client_nonce, target, request))) {
    send_frame(socket, kRefused);
    return std::nullopt;
  }
  send_frame(socket,
             proto::CopyPortProof{copy_proof(key, "agent", nonce, request.client_nonce, target, request), false});
  const Poly1305Key data_key = copy_data_key(key, nonce, request.client_nonce, target);
  return ProvenRequest{std::move(request), data_key};
}

std::string peer_address(int socket) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getpeername(socket, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return "a peer";
  const std::string host = numeric_address(reinterpret_cast<const sockaddr*>(&addr));
  return host.empty() ? "a peer" : host;
}

}  // namespace meshrun::launcher

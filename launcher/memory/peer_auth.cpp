#include "launcher/memory/peer_auth.hpp"

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "launcher/memory/peer_link.hpp"
#include "proto/join_auth.hpp"

namespace meshrun::launcher {

using nlohmann::json;

UniqueFd open_peer_request(const std::string& addr, int port, const std::string& token, json request) {
  UniqueFd peer = connect_peer(addr, port);
  const json hello = receive_frame(peer.get());
  const std::string agent_nonce = hello.value("nonce", "");
  const bool required = hello.value("required", false);
  const std::string where = "the agent at " + addr + ":" + std::to_string(port);
  if (token.empty() && required)
    throw Error(where + " requires the run's join token, and this agent has none: give every agent the same " +
                std::string(proto::kTokenEnv));
  if (!token.empty() && !required)
    throw Error(where + " requires no join token, so it cannot know this run's: give every agent the same " +
                std::string(proto::kTokenEnv));
  std::string client_nonce;
  if (!token.empty()) {
    client_nonce = proto::make_nonce();
    request["client_nonce"] = client_nonce;
    request["proof"] = proto::client_proof(token, agent_nonce, client_nonce);
  }
  send_frame(peer.get(), request);
  if (token.empty()) return peer;
  const json answer = receive_frame(peer.get());
  if (answer.contains("error")) throw Error(where + " refused: " + answer.value("error", ""));
  if (!equal_constant_time(answer.value("proof", ""), proto::daemon_proof(token, agent_nonce, client_nonce)))
    throw Error(where + " does not know the run's join token: no copy goes to it or comes from it");
  return peer;
}

std::optional<json> accept_peer_request(int socket, const std::string& token) {
  const std::string nonce = proto::make_nonce();
  send_frame(socket, {{"nonce", nonce}, {"required", !token.empty()}});
  json request = receive_frame(socket);
  if (token.empty()) return request;
  const std::string client_nonce = request.value("client_nonce", "");
  if (client_nonce.empty() ||
      !equal_constant_time(request.value("proof", ""), proto::client_proof(token, nonce, client_nonce))) {
    send_frame(socket, {{"error", "the run's join token does not match (or none was given)"}});
    return std::nullopt;
  }
  send_frame(socket, {{"proof", proto::daemon_proof(token, nonce, client_nonce)}});
  return request;
}

}  // namespace meshrun::launcher

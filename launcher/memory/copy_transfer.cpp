#include "launcher/memory/copy_transfer.hpp"

#include "launcher/memory/peer_auth.hpp"
#include "launcher/memory/peer_link.hpp"

namespace meshrun::launcher {

using proto::CopyPortReply;

std::string fetch_copy(const CopySource& from, const std::string& key, const proto::CopyPortRequest& request,
                       const std::function<int(uint64_t bytes, std::string& why)>& into) {
  try {
    const PeerConnection peer = open_peer_request(from.addr, from.port, key, request);
    const auto reply = receive_frame(peer.get()).get<CopyPortReply>();
    if (reply.kind != CopyPortReply::Kind::kOk)
      return "node " + std::to_string(from.node) + " says: " + proto::describe(reply);
    std::string why;
    const int fd = into(reply.bytes, why);
    if (!why.empty()) return why;
    Poly1305 mac(peer.data_key);
    receive_copy(peer.get(), fd, reply.bytes, mac);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void send_fetched_copy(int socket, const Poly1305Key& key, int memfd, uint64_t bytes) {
  send_frame(socket, CopyPortReply::ok(bytes));
  Poly1305 mac(key);
  send_copy(socket, memfd, bytes, mac);
  send_copy_tag(socket, mac);
}

std::string receive_pushed_copy(int socket, const Poly1305Key& key, int memfd, uint64_t bytes) {
  try {
    send_frame(socket, CopyPortReply::go());
    Poly1305 mac(key);
    receive_copy(socket, memfd, bytes, mac);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void answer_push(int socket, const std::string& why) {
  try {
    send_frame(socket, why.empty() ? CopyPortReply::ok() : CopyPortReply::failed(why));
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): the pusher is gone; its retry will say
  }
}

}  // namespace meshrun::launcher

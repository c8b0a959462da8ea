#include "trainer/checkpoint/agent_link.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/fd_passing.hpp"

namespace meshrun::trainer {

AgentLink::AgentLink(const std::string& path) : path_(path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) throw Error("the agent's memory socket path is too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  socket_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket_.valid() || ::connect(socket_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    throw Error("cannot reach the meshrun agent's memory socket " + path + ": " + std::strerror(errno));
}

AgentReply AgentLink::request(const proto::HandoverRequest& message, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (!socket_.valid())
    throw Error("the link to the meshrun agent's memory socket is closed (an answer came too late)");
  Packet packet;
  try {
    send_packet(socket_.get(), proto::format_handover_request(message));
    packet = receive_packet(socket_.get(), timeout);
  } catch (const std::exception& e) {
    throw Error("the meshrun agent's memory socket " + path_ + ": " + e.what());
  }
  const std::string op(proto::op_name(message.kind));
  if (packet.closed) throw Error("the meshrun agent closed its memory socket (asked '" + op + "')");
  if (packet.timed_out) {
    // Its late answer would be read as the next request's: the link is done (the agent sees it close).
    socket_.reset();
    throw Error("the meshrun agent did not answer '" + op + "' within " + std::to_string(timeout.count()) + " ms");
  }
  try {
    return AgentReply{proto::parse_handover_reply(packet.text), std::move(packet.fds)};
  } catch (const ProtocolError& e) {
    throw Error("the meshrun agent's answer to '" + op + "': " + e.what());
  }
}

void AgentLink::tell(const proto::HandoverRequest& message) {
  std::lock_guard lock(mutex_);
  if (!socket_.valid())
    throw Error("the link to the meshrun agent's memory socket is closed (an answer came too late)");
  try {
    send_packet(socket_.get(), proto::format_handover_request(message));
  } catch (const std::exception& e) {
    throw Error("the meshrun agent's memory socket " + path_ + ": " + e.what());
  }
}

}  // namespace meshrun::trainer

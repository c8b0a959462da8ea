#include "launcher/memory/handover_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/fd_passing.hpp"
#include "launcher/memory/memory_keeper.hpp"

namespace meshrun::launcher {

using nlohmann::json;

struct HandoverServer::Connection {
  UniqueFd fd;
  uint64_t id = 0;  // this server's count of connections: which worker of a rank is which
  int rank = -1;    // -1 until its hello
};

HandoverServer::HandoverServer(std::string socket_path, MemoryKeeper& keeper)
    : socket_path_(std::move(socket_path)), keeper_(keeper), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(addr.sun_path)) {
    throw Error("memory handover socket path '" + socket_path_ +
                "' is too long for a Unix socket (set TMPDIR to a "
                "shorter folder)");
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ::unlink(socket_path_.c_str());
  if (!listen_.valid() || !wake_.valid() ||
      ::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_.get(), 64) != 0) {
    throw Error("cannot serve the memory handover socket " + socket_path_ + ": " + std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

HandoverServer::~HandoverServer() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) spdlog::debug("memory handover: cannot wake the server thread");
  thread_.join();
  ::unlink(socket_path_.c_str());
}

void HandoverServer::serve() {
  for (;;) {
    std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    for (const auto& c : connections_) fds.push_back({c->fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    if (fds[1].revents != 0) accept_one();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Connection& c = *connections_[i - 2];
      Packet packet;
      try {
        packet = receive_packet(c.fd.get(), std::chrono::milliseconds(0));
      } catch (const std::exception& e) {
        spdlog::warn("memory handover: {}", e.what());
        packet.closed = true;
      }
      if (packet.timed_out) continue;
      if (packet.closed || !handle(c, packet.text)) on_closed(c);
    }
    std::erase_if(connections_, [](const auto& c) { return !c->fd.valid(); });
  }
}

void HandoverServer::accept_one() {
  UniqueFd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return;
  auto c = std::make_unique<Connection>();
  c->fd = std::move(fd);
  c->id = ++connections_made_;
  connections_.push_back(std::move(c));
}

bool HandoverServer::handle(Connection& c, const std::string& text) {
  const json message = json::parse(text, nullptr, false);
  if (!message.is_object()) return false;
  try {
    return answer(c, message);
  } catch (const std::exception& e) {
    // A field of the wrong type, say: that worker's connection ends, the agent serves on.
    spdlog::warn("memory handover: a malformed request from rank {}: {}", c.rank, e.what());
    return false;
  }
}

bool HandoverServer::answer(Connection& c, const json& message) {
  const std::string op = message.value("op", "");
  const int64_t step = message.value("step", int64_t{-1});
  std::vector<int> fds;
  json reply;
  if (op == "hello") {
    reply = keeper_.hello(message.value("rank", -1), message, fds, c.id);
    if (reply.value("op", "") == "granted") c.rank = message.value("rank", -1);
  } else if (c.rank < 0) {
    reply = {{"op", "error"}, {"reason", "say hello first"}};
  } else if (op == "begin") {
    reply = keeper_.begin(c.rank, step);
  } else if (op == "sealed") {
    reply = keeper_.sealed(c.rank, message.value("slot", -1), step);
  } else if (op == "commit") {
    keeper_.commit(c.rank, step);
  } else if (op == "durable") {
    keeper_.durable(c.rank, step);
  } else if (op == "restored") {
    proto::LoadSource source = proto::LoadSource::kUnknown;
    try {
      source = proto::from_string<proto::LoadSource>(message.value("source", ""));
    } catch (const std::exception&) {
      // an unknown word: the ledger says nothing of the source
    }
    keeper_.restored(c.rank, step, source);
  } else if (op == "plan") {
    reply = keeper_.plan(c.rank);
  } else if (op == "open") {
    reply = keeper_.open(c.rank, step, message.value("rank", -1), message.value("world_size", -1), fds);
  } else {
    reply = {{"op", "error"}, {"reason", "unknown op '" + op + "'"}};
  }
  if (reply.is_null()) return true;  // one-way messages
  try {
    send_packet(c.fd.get(), reply.dump(), fds);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

void HandoverServer::on_closed(Connection& c) {
  if (c.rank >= 0) keeper_.disconnected(c.rank, c.id);
  c.fd.reset();
}

}  // namespace meshrun::launcher

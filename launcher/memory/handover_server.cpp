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

#include "common/error.hpp"
#include "common/fd_passing.hpp"
#include "launcher/memory/memory_keeper.hpp"

namespace meshrun::launcher {

namespace {

// The word a worker said of where it restored from; an unknown one: the ledger says nothing of the source.
proto::LoadSource load_source_named(const std::string& word) {
  try {
    return proto::from_string<proto::LoadSource>(word);
  } catch (const std::exception&) {
    return proto::LoadSource::kUnknown;
  }
}

}  // namespace

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
  std::vector<int> fds;
  std::optional<proto::HandoverReply> reply;
  try {
    reply = answer(c, proto::parse_handover_request(text), fds);
  } catch (const proto::UnknownHandoverOp& e) {
    reply = proto::HandoverReply::error(e.what());  // a newer worker: told, and served on
  } catch (const std::exception& e) {
    // Not a request, or a field of the wrong type: that worker's connection ends, the agent serves on.
    spdlog::warn("memory handover: a malformed request from rank {}: {}", c.rank, e.what());
    return false;
  }
  if (!reply) return true;  // one-way
  try {
    send_packet(c.fd.get(), proto::format_handover_reply(*reply), fds);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::optional<proto::HandoverReply> HandoverServer::answer(Connection& c, const proto::HandoverRequest& request,
                                                           std::vector<int>& fds) {
  using Kind = proto::HandoverRequest::Kind;
  if (request.kind == Kind::kHello) {
    auto reply = keeper_.hello(request.rank, request.shape, fds, c.id);
    if (reply.kind == proto::HandoverReply::Kind::kGranted) c.rank = request.rank;
    return reply;
  }
  if (c.rank < 0) return proto::HandoverReply::error("say hello first");
  switch (request.kind) {
    case Kind::kBegin: return keeper_.begin(c.rank, request.step);
    case Kind::kSealed: return keeper_.sealed(c.rank, request.slot, request.step);
    case Kind::kCommit: keeper_.commit(c.rank, request.step); return std::nullopt;
    case Kind::kDurable: keeper_.durable(c.rank, request.step); return std::nullopt;
    case Kind::kRestored:
      keeper_.restored(c.rank, request.step, load_source_named(request.source));
      return std::nullopt;
    case Kind::kPlan: return keeper_.plan(c.rank);
    case Kind::kOpen: return keeper_.open(c.rank, request.step, request.rank, request.world_size, fds);
    case Kind::kHello: break;
  }
  return proto::HandoverReply::error("unknown request");
}

void HandoverServer::on_closed(Connection& c) {
  if (c.rank >= 0) keeper_.disconnected(c.rank, c.id);
  c.fd.reset();
}

}  // namespace meshrun::launcher

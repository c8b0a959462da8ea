#include "launcher/memory/peer_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "launcher/memory/copy_transfer.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/peer_auth.hpp"
#include "launcher/memory/peer_link.hpp"

namespace meshrun::launcher {
namespace {

// A socket on `addr` (IPv4 or IPv6, numeric) and a free port.
UniqueFd listen_on(const std::string& addr, int& port) {
  sockaddr_storage want{};
  socklen_t want_length = 0;
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&want); ::inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    want_length = sizeof(sockaddr_in);
  } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&want);
             ::inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    want_length = sizeof(sockaddr_in6);
  } else {
    throw Error("cannot open the memory copy port on '" + addr + "': not a numeric address of this host");
  }
  // Non-blocking: every serving thread polls it, and those that lose the race for a connection go back to poll.
  UniqueFd fd(::socket(want.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const std::string where = "the memory copy port on " + addr;
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&want), want_length) != 0)
    throw Error("cannot open " + where + ": " + std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::listen(fd.get(), 16) != 0 || ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0)
    throw Error("cannot open " + where + ": " + std::strerror(errno));
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace

PeerServer::PeerServer(MemoryKeeper& keeper, const std::string& addr)
    : keeper_(keeper),
      listen_(listen_on(addr, port_)),
      target_(copy_port_target(addr, port_)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!wake_.valid()) throw Error(std::string("cannot serve the memory copy port: ") + std::strerror(errno));
  for (int i = 0; i < kConcurrentConnections; ++i) threads_.emplace_back([this] { serve(); });
}

PeerServer::~PeerServer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (const int socket : serving_) ::shutdown(socket, SHUT_RDWR);  // a transfer under way fails at once
  }
  const uint64_t one = 1;  // never read: the eventfd stays readable, and wakes every thread
  if (::write(wake_.get(), &one, sizeof one) < 0) spdlog::debug("memory copy port: cannot wake its threads");
  for (auto& thread : threads_) thread.join();
}

bool PeerServer::track(int socket) {
  std::lock_guard lock(mutex_);
  if (stopping_) return false;
  serving_.insert(socket);
  return true;
}

void PeerServer::untrack(int socket) {
  std::lock_guard lock(mutex_);
  serving_.erase(socket);
}

void PeerServer::serve() {
  for (;;) {
    pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    if (fds[1].revents == 0) continue;
    const UniqueFd peer(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer.valid() || !track(peer.get())) continue;  // another thread took it, or the server is stopping
    set_handshake_deadline(peer.get());                 // a stranger holds a thread for seconds at most
    try {
      handle(peer.get());
    } catch (const std::exception& e) {
      spdlog::warn("memory copy port: {}", e.what());
    }
    untrack(peer.get());
  }
}

void PeerServer::handle(int socket) {
  const std::string peer = peer_address(socket);
  std::optional<ProvenRequest> proven;
  try {
    proven = accept_peer_request(socket, keeper_.copy_key(), target_);
  } catch (const ProtocolError& e) {
    spdlog::warn("memory copy port: refused {}: its request cannot be read ({})", peer, e.what());
    return;
  }
  if (!proven) {
    spdlog::warn("memory copy port: refused {}: it did not prove the run's secret", peer);
    return;
  }
  set_peer_deadlines(socket);
  const proto::CopyPortRequest& request = proven->request;
  if (request.run != keeper_.run_id()) {
    spdlog::warn("memory copy port: refused {}: run '{}'", peer, request.run);
    send_frame(socket, kRefused);
    return;
  }
  if (request.kind == proto::CopyPortRequest::Kind::kPush) {
    serve_push(request, proven->data_key, socket);
  } else {
    serve_fetch(request, proven->data_key, socket);
  }
}

void PeerServer::serve_push(const proto::CopyPortRequest& request, const Poly1305Key& key, int socket) {
  MemoryKeeper::PushTarget target = keeper_.place_push(request, peer_address(socket));
  if (target.answer) {
    send_frame(socket, *target.answer);
    return;
  }
  std::string why = receive_pushed_copy(socket, key, target.into.get(), request.bytes);
  why = keeper_.settle_push(request, target.slot, std::move(why));
  answer_push(socket, why);
}

void PeerServer::serve_fetch(const proto::CopyPortRequest& request, const Poly1305Key& key, int socket) {
  const auto lent = keeper_.lend_for_fetch(request);
  if (!lent) {
    send_frame(socket, proto::CopyPortReply::failed("no copy of step " + std::to_string(request.step) + " of rank " +
                                                    std::to_string(request.rank) + " here"));
    return;
  }
  try {
    send_fetched_copy(socket, key, lent->fd.get(), lent->bytes);
  } catch (const std::exception& e) {
    spdlog::warn("memory: sending rank {}'s copy of step {} failed: {}", request.rank, request.step, e.what());
  }
  keeper_.fetch_served(request, *lent);
}

}  // namespace meshrun::launcher

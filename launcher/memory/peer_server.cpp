#include "launcher/memory/peer_server.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "launcher/memory/memory_keeper.hpp"
#include "launcher/memory/peer_auth.hpp"
#include "launcher/memory/peer_link.hpp"

namespace meshrun::launcher {
namespace {

// A socket on every address and a free port: IPv6 with IPv4 mapped, or IPv4 where IPv6 is off.
UniqueFd listen_anywhere(int& port) {
  UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.valid()) {
    const int off = 0;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fd.reset();
  }
  if (!fd.valid()) {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
      throw Error(std::string("cannot open the memory copy port: ") + std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (::listen(fd.get(), 16) != 0 || ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0)
    throw Error(std::string("cannot open the memory copy port: ") + std::strerror(errno));
  port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace

PeerServer::PeerServer(MemoryKeeper& keeper)
    : keeper_(keeper), listen_(listen_anywhere(port_)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!wake_.valid()) throw Error(std::string("cannot serve the memory copy port: ") + std::strerror(errno));
  thread_ = std::thread([this] { serve(); });
}

PeerServer::~PeerServer() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) spdlog::debug("memory copy port: cannot wake its thread");
  thread_.join();
}

void PeerServer::serve() {
  for (;;) {
    pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    if (fds[1].revents == 0) continue;
    const UniqueFd peer(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!peer.valid()) continue;
    set_peer_deadlines(peer.get());
    try {
      handle(peer.get());
    } catch (const std::exception& e) {
      spdlog::warn("memory copy port: {}", e.what());
    }
  }
}

void PeerServer::handle(int socket) {
  const auto proven = accept_peer_request(socket, keeper_.token());
  if (!proven) {
    spdlog::warn("memory copy port: refused a request whose join token did not match");
    return;
  }
  const nlohmann::json& request = *proven;
  if (request.value("run", "") != keeper_.run_id()) {
    send_frame(socket,
               {{"error", "this agent serves run " + keeper_.run_id() + ", not '" + request.value("run", "") + "'"}});
    return;
  }
  const std::string op = request.value("op", "");
  if (op == "push") {
    keeper_.receive_push(request, socket);
  } else if (op == "fetch") {
    keeper_.serve_fetch(request, socket);
  } else {
    send_frame(socket, {{"error", "unknown op '" + op + "'"}});
  }
}

}  // namespace meshrun::launcher

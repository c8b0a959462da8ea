#include "diagnostics/peers/peer_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

int remaining_ms(TimePoint deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1'000'000));
}

void make_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  // The latency ping-pong sends 8-byte messages: Nagle would hold each one back.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

PeerSocket::PeerSocket(UniqueFd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {
  make_nonblocking(fd_.get());
}

PeerSocket PeerSocket::connect(const Endpoint& endpoint, std::string peer, TimePoint deadline) {
  return PeerSocket(proto::connect_tcp(endpoint, deadline), std::move(peer));
}

void PeerSocket::wait_ready(short events, TimePoint deadline, const char* what) {
  pollfd p{fd_.get(), events, 0};
  for (;;) {
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return;
    if (rc == 0) throw TimeoutError(std::string("timed out ") + what + " " + peer_);
    if (errno != EINTR)
      throw NetworkError(std::string("poll while ") + what + " " + peer_ + ": " + std::strerror(errno));
  }
}

void PeerSocket::send_all(const void* data, size_t size, TimePoint deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd_.get(), p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(POLLOUT, deadline, "sending to");
    } else if (n < 0 && errno != EINTR) {
      throw NetworkError("send to " + peer_ + " failed: " + std::strerror(errno));
    }
  }
}

void PeerSocket::recv_all(void* data, size_t size, TimePoint deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd_.get(), p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n == 0) {
      throw NetworkError(peer_ + " closed the connection in the middle of the measurement");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(POLLIN, deadline, "waiting for data from");
    } else if (errno != EINTR) {
      throw NetworkError("receive from " + peer_ + " failed: " + std::strerror(errno));
    }
  }
}

PeerListener::PeerListener(int family) {
  fd_.reset(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd_.valid()) throw NetworkError(std::string("cannot create the bandwidth listener: ") + std::strerror(errno));
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof *a;
  }
  if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_.get(), 64) != 0) {
    throw NetworkError(std::string("cannot listen for bandwidth peers: ") + std::strerror(errno));
  }
  ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                   : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

PeerSocket PeerListener::accept(TimePoint deadline) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd >= 0) {
      char host[INET6_ADDRSTRLEN] = {};
      const void* src = addr.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
      ::inet_ntop(addr.ss_family, src, host, sizeof host);
      return PeerSocket(UniqueFd(fd), host);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw NetworkError(std::string("accept on the bandwidth listener failed: ") + std::strerror(errno));
    }
    pollfd p{fd_.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) throw TimeoutError("no peer connected to the bandwidth listener in time");
    if (rc < 0 && errno != EINTR)
      throw NetworkError(std::string("poll on the bandwidth listener: ") + std::strerror(errno));
  }
}

}  // namespace meshrun::diagnostics

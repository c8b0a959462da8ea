// FakePeer: a one-thread TCP server on 127.0.0.1:0 that plays a given role towards our probe: a
// plain server that never answers, one that answers with HTTP, a TCPStore that echoes pings but
// drops meshrun requests, or a meshrun daemon whose clock is off. Serves connections until destroyed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "proto/store/byte_codec.hpp"
#include "proto/store/tcpstore_protocol.hpp"

namespace meshrun::testing {

enum class PeerRole { kSilent, kHttp, kTcpStoreOnly, kSkewedMeshrun };

class FakePeer {
 public:
  explicit FakePeer(PeerRole role, int64_t clock_offset_ms = 0) : role_(role), offset_ms_(clock_offset_ms) {
    listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listener_.get(), 16);
    socklen_t len = sizeof addr;
    ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    // kSilent never accepts: the kernel completes the handshake and nobody ever reads, like `nc -l`
    // that is busy or a server stuck in its accept backlog.
    if (role_ != PeerRole::kSilent) thread_ = std::thread([this] { serve(); });
  }
  ~FakePeer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  FakePeer(const FakePeer&) = delete;
  FakePeer& operator=(const FakePeer&) = delete;

  uint16_t port() const { return port_; }

 private:
  bool read_exact(int fd, void* out, size_t n) {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) <= 0) {
        if (stop_) return false;
        continue;
      }
      const ssize_t got = ::recv(fd, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }

  void serve() {
    while (!stop_) {
      pollfd pfd{listener_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 50) <= 0) continue;
      UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!client.valid()) continue;
      if (role_ == PeerRole::kHttp) {
        char buf[64];
        pollfd in{client.get(), POLLIN, 0};
        if (::poll(&in, 1, 2000) > 0) (void)::recv(client.get(), buf, sizeof buf, 0);
        const std::string reply = "HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        (void)::send(client.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
        continue;
      }
      serve_store(client.get());
    }
  }

  // Speaks just enough TCPStore: VALIDATE, PING and (for kSkewedMeshrun) a meshrun hello.
  void serve_store(int fd) {
    while (!stop_) {
      uint8_t type = 0;
      if (!read_exact(fd, &type, 1)) return;
      if (type == static_cast<uint8_t>(proto::QueryType::kValidate) ||
          type == static_cast<uint8_t>(proto::QueryType::kPing)) {
        uint32_t v = 0;
        if (!read_exact(fd, &v, sizeof v)) return;
        if (type == static_cast<uint8_t>(proto::QueryType::kPing)) (void)::send(fd, &v, sizeof v, MSG_NOSIGNAL);
        continue;
      }
      if (type != static_cast<uint8_t>(proto::QueryType::kMeshrun) || role_ == PeerRole::kTcpStoreOnly) return;
      uint64_t len = 0;
      if (!read_exact(fd, &len, sizeof len) || len > 4096) return;
      std::string body(len, '\0');
      if (!read_exact(fd, body.data(), len)) return;
      const auto now_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      const nlohmann::json hello = {{"server", "meshrun-rendezvous"},
                                    {"version", "0.1.0"},
                                    {"unix_time_ms", now_ms + offset_ms_},
                                    {"peer", "127.0.0.1:1"}};
      proto::ByteWriter w;
      w.put_string(hello.dump());
      (void)::send(fd, w.bytes().data(), w.bytes().size(), MSG_NOSIGNAL);
    }
  }

  PeerRole role_;
  int64_t offset_ms_;
  UniqueFd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace meshrun::testing

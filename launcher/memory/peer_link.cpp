#include "launcher/memory/peer_link.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "common/sha256.hpp"
#include "proto/agents/copy_port_messages.hpp"

namespace meshrun::launcher {
namespace {

constexpr uint32_t kMaxFrameBytes = 64 * 1024;

[[noreturn]] void fail(const std::string& what) {
  throw Error("memory copy transfer: " + what + ": " + (errno == EAGAIN ? "timed out" : std::strerror(errno)));
}

void write_all(int socket, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(socket, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("send");
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int socket, char* data, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(socket, data, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw Error("memory copy transfer: the other agent closed the connection");
    if (r < 0) fail("recv");
    data += r;
    n -= static_cast<size_t>(r);
  }
}

constexpr uint64_t kCopyPiece = 4 << 20;  // tagged and sent (or received and tagged) while it is in the cache

// A memfd's first `bytes`, mapped for the length of one transfer.
class CopyMapping {
 public:
  CopyMapping(int memfd, uint64_t bytes, int protection) : bytes_(bytes) {
    map_ = ::mmap(nullptr, bytes, protection, MAP_SHARED, memfd, 0);
    if (map_ == MAP_FAILED) fail("mapping the slot");
  }
  ~CopyMapping() { ::munmap(map_, bytes_); }
  CopyMapping(const CopyMapping&) = delete;
  CopyMapping& operator=(const CopyMapping&) = delete;
  char* at(uint64_t offset) const { return static_cast<char*>(map_) + offset; }

 private:
  void* map_ = nullptr;
  uint64_t bytes_;
};

std::string hex_of(const Poly1305Tag& tag) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (const uint8_t byte : tag) {
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

}  // namespace

UniqueFd connect_peer(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr)
    throw Error("memory copy transfer: '" + addr + "' is not a numeric address");
  UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const bool ok =
      fd.valid() && (set_peer_deadlines(fd.get()), true) && ::connect(fd.get(), found->ai_addr, found->ai_addrlen) == 0;
  const int error = errno;
  ::freeaddrinfo(found);
  if (!ok) {
    errno = error;
    fail("connecting to the agent at " + addr + ":" + std::to_string(port));
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void set_handshake_deadline(int socket) {
  const timeval tv{kHandshakeTimeout.count(), 0};
  ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void set_peer_deadlines(int socket) {
  const timeval tv{kPeerTimeout.count(), 0};
  ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void send_frame(int socket, const nlohmann::json& message) {
  const std::string text = message.dump();
  const auto n = static_cast<uint32_t>(text.size());
  const std::array<char, 4> length{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                                   static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
  write_all(socket, length.data(), length.size());
  write_all(socket, text.data(), text.size());
}

nlohmann::json receive_frame(int socket) {
  std::array<unsigned char, 4> length{};
  read_all(socket, reinterpret_cast<char*>(length.data()), length.size());
  const uint32_t n = length[0] | (length[1] << 8) | (length[2] << 16) | (static_cast<uint32_t>(length[3]) << 24);
  if (n > kMaxFrameBytes)
    throw Error("memory copy transfer: a frame of " + std::to_string(n) + " bytes (at most 64 KiB)");
  std::string text(n, '\0');
  read_all(socket, text.data(), n);
  nlohmann::json message = nlohmann::json::parse(text, nullptr, false);
  if (!message.is_object()) throw Error("memory copy transfer: a frame that is no JSON object");
  return message;
}

void send_copy(int socket, int memfd, uint64_t to, Poly1305& mac, uint64_t from) {
  if (from >= to) return;
  const CopyMapping map(memfd, to, PROT_READ);
  for (uint64_t at = from; at < to; at += kCopyPiece) {
    const size_t n = static_cast<size_t>(std::min(kCopyPiece, to - at));
    mac.update(map.at(at), n);
    write_all(socket, map.at(at), n);
  }
}

void send_copy_tag(int socket, Poly1305& mac) { send_frame(socket, proto::CopyPortTag{hex_of(mac.finish())}); }

void receive_copy(int socket, int memfd, uint64_t bytes, Poly1305& mac) {
  if (bytes > 0) {
    const CopyMapping map(memfd, bytes, PROT_READ | PROT_WRITE);
    for (uint64_t at = 0; at < bytes; at += kCopyPiece) {
      const size_t n = static_cast<size_t>(std::min(kCopyPiece, bytes - at));
      read_all(socket, map.at(at), n);
      mac.update(map.at(at), n);
    }
  }
  const auto tag = receive_frame(socket).get<proto::CopyPortTag>();
  if (!equal_constant_time(tag.mac, hex_of(mac.finish())))
    throw Error("memory copy transfer: the copy's bytes do not match their MAC: changed on the way, not kept");
}

}  // namespace meshrun::launcher

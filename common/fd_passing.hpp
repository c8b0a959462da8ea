// One message and its file descriptors on a SOCK_SEQPACKET Unix socket (SCM_RIGHTS): how a worker and its
// agent hand memory-copy slots (memfds) over. Header-only and POSIX-only, so the trainer can use it without
// linking meshrun_common. Received descriptors are close-on-exec.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/unique_fd.hpp"

namespace meshrun {

inline constexpr size_t kMaxPacketBytes = 64 * 1024;
inline constexpr size_t kMaxPacketFds = 8;

/// What receive_packet read: the message, and the descriptors that came with it. `closed` at EOF (the peer
/// is gone); `timed_out` when nothing came before the deadline.
struct Packet {
  std::string text;
  std::vector<UniqueFd> fds;
  bool closed = false;
  bool timed_out = false;
};

/// Sends `text` with `fds` as one packet. Throws std::runtime_error naming errno (EPIPE: the peer is gone).
inline void send_packet(int socket, const std::string& text, const std::vector<int>& fds = {}) {
  if (text.size() > kMaxPacketBytes || fds.size() > kMaxPacketFds) {
    throw std::runtime_error("a handover packet of " + std::to_string(text.size()) + " bytes and " +
                             std::to_string(fds.size()) + " descriptors is over the limit");
  }
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPacketFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (::sendmsg(socket, &msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string("cannot send a handover packet: ") + std::strerror(errno));
  }
}

/// Waits up to `timeout` for one packet (a negative timeout waits for ever). Throws std::runtime_error on a
/// socket error or a truncated packet.
inline Packet receive_packet(int socket, std::chrono::milliseconds timeout) {
  Packet packet;
  pollfd p{socket, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {}
  if (ready == 0) {
    packet.timed_out = true;
    return packet;
  }
  std::string buffer(kMaxPacketBytes, '\0');
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPacketFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {}
  if (n < 0) throw std::runtime_error(std::string("cannot receive a handover packet: ") + std::strerror(errno));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      packet.fds.emplace_back(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    throw std::runtime_error("a handover packet was truncated (over " + std::to_string(kMaxPacketBytes) + " bytes or " +
                             std::to_string(kMaxPacketFds) + " descriptors)");
  }
  packet.closed = n == 0;
  buffer.resize(static_cast<size_t>(n));
  packet.text = std::move(buffer);
  return packet;
}

}  // namespace meshrun

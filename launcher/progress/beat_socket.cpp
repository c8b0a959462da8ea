#include "launcher/progress/beat_socket.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "proto/worker/progress_beat.hpp"

namespace meshrun::launcher {
namespace {
constexpr size_t kMaxDatagram = 4096;
}  // namespace

BeatSocket::BeatSocket(std::string path) : path_(std::move(path)) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) {
    throw Error("progress socket path '" + path_ + "' is longer than the " + std::to_string(sizeof(addr.sun_path) - 1) +
                " bytes a Unix socket allows (set TMPDIR to a shorter folder)");
  }
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd_.valid()) throw Error(std::string("cannot create a progress socket: ") + std::strerror(errno));
  ::unlink(path_.c_str());
  if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw Error("cannot bind the progress socket " + path_ + ": " + std::strerror(errno));
  }
}

int BeatSocket::send_to(const std::string& path, const std::string& text) const {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const ssize_t sent = ::sendto(fd_.get(), text.data(), text.size(), MSG_DONTWAIT,
                                reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  return sent == static_cast<ssize_t>(text.size()) ? 0 : errno;
}

BeatSocket::~BeatSocket() {
  if (fd_.valid()) ::unlink(path_.c_str());
}

std::vector<std::string> BeatSocket::drain() {
  std::vector<std::string> out;
  char buf[kMaxDatagram];  // beats are at most proto::kMaxBeatBytes; the hook's status may be longer
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0) break;  // EAGAIN: nothing left (other errors: nothing to read either)
    out.emplace_back(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace meshrun::launcher

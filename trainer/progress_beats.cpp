#include "trainer/progress_beats.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace meshrun::trainer {

ProgressBeats::ProgressBeats(std::string socket_path) : path_(std::move(socket_path)) {
  if (path_.empty()) return;
  sockaddr_un addr{};
  if (path_.size() >= sizeof(addr.sun_path)) {
    throw UsageError("MESHRUN_PROGRESS='" + path_ + "' is longer than a Unix socket path may be (" +
                     std::to_string(sizeof(addr.sun_path) - 1) + " bytes): unset it or launch with meshrun");
  }
  fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd_.valid()) throw Error("cannot create the progress beat socket: " + std::string(std::strerror(errno)));
}

void ProgressBeats::step_done(int64_t step, double loss, double tokens_per_s, double compute_s) {
  send(proto::Beat{.step = step, .loss = loss, .tokens_per_s = tokens_per_s, .compute_s = compute_s});
}

void ProgressBeats::phase(int64_t step, const std::string& name) {
  proto::Beat beat;
  beat.step = step;
  beat.phase = name;
  send(beat);
}

void ProgressBeats::send(const proto::Beat& beat) {
  if (!fd_.valid()) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.c_str(), path_.size());
  const std::string text = proto::format_beat(beat);
  // EAGAIN (agent behind), ECONNREFUSED/ENOENT (agent gone): a lost beat costs nothing.
  (void)::sendto(fd_.get(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                 sizeof(addr));
}

std::string progress_socket_from_env() {
  const char* path = std::getenv("MESHRUN_PROGRESS");
  return path == nullptr ? std::string() : std::string(path);
}

}  // namespace meshrun::trainer

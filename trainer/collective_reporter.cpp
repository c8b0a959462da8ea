#include "trainer/collective_reporter.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/error.hpp"
#include "proto/worker/hook_messages.hpp"

namespace meshrun::trainer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPollMs = 100;  // as often as the Python hook reports (its POLL_S)
constexpr auto kResend = std::chrono::seconds(5);

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) throw Error("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

CollectiveReporter::CollectiveReporter(std::string agent_socket, std::shared_ptr<const CollectiveLedger> ledger)
    : agent_(agent_socket.empty() ? std::string() : agent_socket + ".fr"), ledger_(std::move(ledger)) {
  if (agent_.empty()) return;
  // A diagnostic never stops training: without its socket the reporter stays off and says why.
  try {
    listen_path_ = agent_socket + ".hook";
    const sockaddr_un addr = unix_address(listen_path_);
    fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd_.valid()) throw Error(std::string("cannot create a socket: ") + std::strerror(errno));
    ::unlink(listen_path_.c_str());
    if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw Error("cannot bind " + listen_path_ + ": " + std::strerror(errno));
    }
  } catch (const Error& e) {
    std::fprintf(stderr,
                 "meshrun-trainer: not reporting collectives to meshrun's agent (hang verdicts fall back "
                 "on beats): %s\n",
                 e.what());
    fd_.reset();
    return;
  }
  thread_ = std::thread([this] { run(); });
}

CollectiveReporter::~CollectiveReporter() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  ::unlink(listen_path_.c_str());
}

void CollectiveReporter::send(const std::string& text) const {
  const sockaddr_un addr = unix_address(agent_);
  // A lost message costs nothing: the agent is busy or gone, and the next status follows.
  (void)::sendto(fd_.get(), text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
}

void CollectiveReporter::answer(const std::string& datagram) const {
  proto::HookRequest request;
  try {
    request = proto::parse_hook_request(datagram);
  } catch (const ProtocolError&) {
    return;  // not the agent's: nothing to answer
  }
  if (request.kind != proto::HookRequest::Kind::kDump) return;  // clocks, arrivals and stacks: Python's hook only
  const std::string& path = request.path;
  proto::CollectiveDump record = ledger_->dump();
  record.pid = ::getpid();
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << proto::format_collective_dump(record);
    if (!out) {
      send(proto::format_hook_message(proto::HookMessage::failed("cannot write " + path)));
      return;
    }
  }
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    send(proto::format_hook_message(proto::HookMessage::failed("cannot rename to " + path)));
    return;
  }
  send(proto::format_hook_message(proto::HookMessage::dumped(path)));
}

void CollectiveReporter::run() {
  send(proto::format_hook_message(proto::HookMessage::hello(::getpid(), true)));
  std::string last;
  Clock::time_point last_at{};
  while (!stop_) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, kPollMs) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(fd_.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) answer(std::string(buf, static_cast<size_t>(n)));
    }
    const proto::HookMessage message = ledger_->status();
    if (message.groups.empty()) continue;  // no collective yet
    const std::string status = proto::format_hook_message(message);
    if (status != last || Clock::now() - last_at >= kResend) {
      send(status);
      last = status;
      last_at = Clock::now();
    }
  }
}

}  // namespace meshrun::trainer

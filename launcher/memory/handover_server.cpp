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
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/fd_passing.hpp"

namespace meshrun::launcher {

using nlohmann::json;

namespace {
constexpr int kSlotsPerRank = 2;
}  // namespace

struct HandoverServer::Connection {
  UniqueFd fd;
  int rank = -1;  // -1 until its hello
};

HandoverServer::HandoverServer(std::string socket_path, std::string slots_name)
    : socket_path_(std::move(socket_path)),
      slots_name_(std::move(slots_name)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      shelf_(kSlotsPerRank) {
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
  connections_.push_back(std::move(c));
}

bool HandoverServer::handle(Connection& c, const std::string& text) {
  const json message = json::parse(text, nullptr, false);
  if (!message.is_object()) return false;
  const std::string op = message.value("op", "");
  std::vector<int> fds;
  std::string reply;
  std::lock_guard lock(mutex_);
  if (op == "hello") {
    reply = on_hello(c, message, fds);
  } else if (c.rank < 0) {
    reply = json{{"op", "error"}, {"reason", "say hello first"}}.dump();
  } else if (op == "begin") {
    reply = on_begin(c, message.value("step", int64_t{-1}));
  } else if (op == "sealed") {
    on_sealed(c, message.value("slot", -1), message.value("step", int64_t{-1}));
  } else if (op == "commit") {
    shelf_.commit(c.rank, message.value("step", int64_t{-1}));
  } else if (op == "plan") {
    reply = json{{"op", "plan"}, {"candidates", shelf_.candidates(c.rank)}}.dump();
  } else if (op == "open") {
    reply = on_open(c, message.value("step", int64_t{-1}), fds);
  } else {
    reply = json{{"op", "error"}, {"reason", "unknown op '" + op + "'"}}.dump();
  }
  if (reply.empty()) return true;  // one-way messages
  try {
    send_packet(c.fd.get(), reply, fds);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

std::string HandoverServer::on_hello(Connection& c, const nlohmann::json& hello, std::vector<int>& fds) {
  const int rank = hello.value("rank", -1);
  const uint64_t bytes = hello.value("slot_bytes", uint64_t{0});
  const uint64_t digest = hello.value("digest", uint64_t{0});
  if (rank < 0 || bytes < proto::kHeaderBytes) {
    return json{{"op", "refused"}, {"reason", "hello needs a rank and the bytes of a copy"}}.dump();
  }
  RankSlots& held = slots_[rank];
  if (held.slots.empty() || held.slot_bytes != bytes || held.digest != digest) {
    // A new layout or another run's model: new slots (stage 1 keeps no older layout).
    held = RankSlots{bytes, digest, {}};
    shelf_.forget(rank);
    try {
      for (int i = 0; i < kSlotsPerRank; ++i) {
        const std::string name = slots_name_ + " rank" + std::to_string(rank) + " slot" + std::to_string(i);
        held.slots.push_back(std::make_unique<MemfdSlot>(name, bytes));
      }
    } catch (const std::exception& e) {
      slots_.erase(rank);
      return json{{"op", "refused"}, {"reason", e.what()}}.dump();
    }
  }
  c.rank = rank;
  for (const auto& slot : held.slots) fds.push_back(slot->fd());
  return json{{"op", "granted"}, {"slot_bytes", held.slots.front()->bytes()}, {"slots", kSlotsPerRank}}.dump();
}

std::string HandoverServer::on_begin(const Connection& c, int64_t step) {
  const LendResult lent = shelf_.lend(c.rank, step);
  if (!lent.slot) return json{{"op", "busy"}, {"reason", lent.busy_reason}}.dump();
  return json{{"op", "lend"}, {"slot", *lent.slot}}.dump();
}

void HandoverServer::on_sealed(const Connection& c, int slot, int64_t step) {
  const auto& held = slots_.at(c.rank).slots;
  std::string why = slot >= 0 && static_cast<size_t>(slot) < held.size() ? held[static_cast<size_t>(slot)]->check()
                                                                         : "no slot " + std::to_string(slot);
  if (why.empty()) {
    const proto::CopyHeader header = held[static_cast<size_t>(slot)]->read_header();
    if (header.step != step || header.rank != c.rank) why = "the copy's header names another step or rank";
  }
  if (why.empty()) why = shelf_.seal(c.rank, slot, step);
  if (!why.empty()) {
    spdlog::warn("memory copy of rank {} step {} is not kept: {}", c.rank, step, why);
    shelf_.on_disconnect(c.rank);  // the lent slot is unusable: torn
  }
}

std::string HandoverServer::on_open(const Connection& c, int64_t step, std::vector<int>& fds) {
  const auto slot = shelf_.slot_of(c.rank, step);
  const auto candidates = shelf_.candidates(c.rank);
  if (!slot || std::find(candidates.begin(), candidates.end(), step) == candidates.end()) {
    return json{{"op", "error"},
                {"reason", "no committed copy of step " + std::to_string(step) + " for rank " + std::to_string(c.rank) +
                               " on this node"}}
        .dump();
  }
  fds.push_back(slots_.at(c.rank).slots[static_cast<size_t>(*slot)]->fd());
  return json{{"op", "copy"}, {"step", step}, {"slot", *slot}}.dump();
}

void HandoverServer::on_closed(Connection& c) {
  std::lock_guard lock(mutex_);
  if (c.rank >= 0) shelf_.on_disconnect(c.rank);
  c.fd.reset();
}

std::vector<int64_t> HandoverServer::candidates(int rank) const {
  std::lock_guard lock(mutex_);
  return shelf_.candidates(rank);
}

uint64_t HandoverServer::held_bytes() const {
  std::lock_guard lock(mutex_);
  uint64_t total = 0;
  for (const auto& [rank, held] : slots_) {
    for (const auto& slot : held.slots) total += slot->bytes();
  }
  return total;
}

}  // namespace meshrun::launcher

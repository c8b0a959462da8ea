#include "diagnostics/ping/probe.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "diagnostics/ping/resolve.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"
#include "proto/store/byte_codec.hpp"
#include "proto/store/request.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

using Clock = std::chrono::steady_clock;

enum class Io { kOk, kTimeout, kClosed, kError };

int remaining_ms(TimePoint deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1'000'000));
}

double seconds_since(TimePoint start) { return to_seconds(Clock::now() - start); }

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A connected socket with deadline-bounded send/receive that report, rather than throw, what happened:
// for a probe, "closed" and "no reply" are findings.
class ProbeSocket {
 public:
  explicit ProbeSocket(UniqueFd fd) : fd_(std::move(fd)) {}

  Io send_all(const std::string& bytes, TimePoint deadline) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      pollfd p{fd_.get(), POLLOUT, 0};
      const int rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return Io::kTimeout;
      const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        error_ = errno;
        return errno == EPIPE || errno == ECONNRESET ? Io::kClosed : Io::kError;
      }
      sent += static_cast<size_t>(n);
    }
    return Io::kOk;
  }

  /// Reads exactly `size` bytes into `out` (appending); on failure `out` holds what did arrive.
  Io recv_exact(std::string& out, size_t size, TimePoint deadline) {
    const size_t target = out.size() + size;
    while (out.size() < target) {
      pollfd p{fd_.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return Io::kTimeout;
      char buf[4096];
      const ssize_t n = ::recv(fd_.get(), buf, std::min(sizeof buf, target - out.size()), 0);
      if (n == 0) return Io::kClosed;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        error_ = errno;
        return errno == ECONNRESET ? Io::kClosed : Io::kError;
      }
      out.append(buf, static_cast<size_t>(n));
    }
    return Io::kOk;
  }

  int error() const { return error_; }

 private:
  UniqueFd fd_;
  int error_ = 0;
};

std::string validate_request() {
  return proto::encode_request(
      {.type = proto::QueryType::kValidate, .keys = {}, .values = {}, .number = proto::kValidationMagic});
}

// Shows unexpected bytes the way a human recognizes them: "HTTP/1.0 400" rather than hex soup.
std::string describe_bytes(const std::string& bytes) {
  std::string printable;
  std::string hex;
  char buf[4];
  for (unsigned char c : bytes) {
    printable += std::isprint(c) ? static_cast<char>(c) : '.';
    std::snprintf(buf, sizeof buf, "%02x", c);
    if (!hex.empty()) hex += ' ';
    hex += buf;
  }
  return "'" + printable + "' (" + hex + ")";
}

// Reads one length-prefixed MESHRUN reply; "" with `io` set when it did not arrive whole.
std::string read_meshrun_reply(ProbeSocket& socket, TimePoint deadline, Io& io, bool& implausible) {
  std::string len_bytes;
  implausible = false;
  io = socket.recv_exact(len_bytes, sizeof(uint64_t), deadline);
  if (io != Io::kOk) return {};
  uint64_t len = 0;
  std::memcpy(&len, len_bytes.data(), sizeof len);
  if (len > (1u << 20)) {  // a hello reply is tiny; anything larger is someone else's protocol
    implausible = true;
    return len_bytes;
  }
  std::string text;
  io = socket.recv_exact(text, static_cast<size_t>(len), deadline);
  return text;
}

ProbeOutcome outcome_of(proto::ConnectFailure kind) {
  switch (kind) {
    case proto::ConnectFailure::kResolve: return ProbeOutcome::kResolve;
    case proto::ConnectFailure::kRefused: return ProbeOutcome::kRefused;
    case proto::ConnectFailure::kTimeout: return ProbeOutcome::kTimeout;
    case proto::ConnectFailure::kUnreachable: return ProbeOutcome::kUnreachable;
    case proto::ConnectFailure::kRejected: return ProbeOutcome::kRejected;
    case proto::ConnectFailure::kOther: break;
  }
  return ProbeOutcome::kError;
}

const char* hint_for(ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kResolve: return "use the rendezvous host's IP address, or fix /etc/hosts or DNS on this node";
    case ProbeOutcome::kRefused:
      return "start meshrun-rendezvous (or the node that hosts it) first, and check the port";
    case ProbeOutcome::kTimeout:
      return "a firewall drops the packets, or the address is on a network this node cannot reach; "
             "check iptables/security groups on the daemon host and that the address is its private IP";
    case ProbeOutcome::kUnreachable:
      return "this node has no route to that address: use an address on a network both hosts share";
    case ProbeOutcome::kNotStore:
      return "another program owns this port: point --rdzv-endpoint at meshrun-rendezvous's port";
    case ProbeOutcome::kTcpStore:
      return "this is a TCPStore server (e.g. PyTorch's), not meshrun-rendezvous; fine for MASTER_ADDR, "
             "not for --rdzv-endpoint";
    case ProbeOutcome::kRejected: return "add this node's network to the daemon's --allow rules";
    default: return "";
  }
}

ProbeResult finish(ProbeResult r, ProbeOutcome outcome, std::string detail) {
  r.outcome = outcome;
  r.detail = std::move(detail);
  r.hint = hint_for(outcome);
  return r;
}

// The daemon answers a rejected peer's MESHRUN request with an error before closing; a fresh
// connection that skips the PING tells "rejected by --allow" apart from "someone else hung up".
std::optional<std::string> rejection_text(const Endpoint& endpoint, Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  try {
    ProbeSocket socket(proto::connect_tcp(endpoint, deadline));
    if (socket.send_all(validate_request() + proto::encode_hello_request(), deadline) != Io::kOk) return std::nullopt;
    Io io = Io::kOk;
    bool implausible = false;
    const std::string text = read_meshrun_reply(socket, deadline, io, implausible);
    if (io != Io::kOk || implausible) return std::nullopt;
    const auto reply = nlohmann::json::parse(text, nullptr, false);
    if (reply.is_object() && reply.contains("error") && reply["error"].is_string()) {
      return reply["error"].get<std::string>();
    }
  } catch (const Error&) {}
  return std::nullopt;
}

std::string connect_failure_text(const proto::ConnectError& e, Duration timeout) {
  std::string detail = e.what();
  if (e.kind() == proto::ConnectFailure::kTimeout) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (no TCP handshake reply within %.1f s)", to_seconds(timeout));
    detail += buf;
  }
  return detail;
}

// How a TCPStore server failed a meshrun hello, for "<where> answers store pings but <how> a meshrun hello".
const char* hello_failure_verb(Io io) {
  return io == Io::kTimeout ? "did not answer" : io == Io::kClosed ? "closed the connection on" : "garbled";
}

// One probe in progress. Each step either records what it measured and returns true, or finishes the
// result with that step's outcome and returns false. Connect, ping and hello share one deadline.
class Probe {
 public:
  Probe(const Endpoint& endpoint, Duration timeout)
      : endpoint_(endpoint),
        numeric_(endpoint),
        where_(endpoint.to_string()),
        timeout_(timeout),
        deadline_(Clock::now() + timeout) {}

  ProbeResult run() {
    if (resolve() && connect() && ping()) hello();
    return result_;
  }

 private:
  bool fail(ProbeOutcome outcome, std::string detail) {
    result_ = finish(std::move(result_), outcome, std::move(detail));
    return false;
  }

  bool rejected(const std::string& why) {
    return fail(ProbeOutcome::kRejected, "the meshrun daemon at " + where_ + " rejected this host: " + why);
  }

  bool resolve() {
    try {
      numeric_.host = resolve_host(endpoint_.host, timeout_).front();
    } catch (const proto::ConnectError& e) {
      return fail(ProbeOutcome::kResolve, e.what());
    }
    result_.address = numeric_.to_string();
    return true;
  }

  bool connect() {
    const auto start = Clock::now();
    try {
      socket_.emplace(proto::connect_tcp(numeric_, deadline_));
    } catch (const proto::ConnectError& e) {
      return fail(outcome_of(e.kind()), connect_failure_text(e, timeout_));
    } catch (const Error& e) {
      return fail(ProbeOutcome::kError, e.what());
    }
    result_.connect_s = seconds_since(start);
    return true;
  }

  // VALIDATE + PING in one write: a TCPStore server echoes the nonce, anything else does not.
  bool ping() {
    const uint32_t nonce = 0x6d650000u ^ static_cast<uint32_t>(::getpid() & 0xffff);
    const std::string request = proto::encode_request(
        {.type = proto::QueryType::kPing, .keys = {}, .values = {}, .number = static_cast<int64_t>(nonce)});
    const auto start = Clock::now();
    std::string echo;
    Io io = socket_->send_all(validate_request() + request, deadline_);
    if (io == Io::kOk) io = socket_->recv_exact(echo, sizeof nonce, deadline_);
    if (io != Io::kOk) return no_echo(io, echo);
    uint32_t got = 0;
    std::memcpy(&got, echo.data(), sizeof got);
    if (got != nonce) {
      return fail(ProbeOutcome::kNotStore,
                  where_ + " answered a store ping with " + describe_bytes(echo) +
                      " instead of the echo: not a meshrun/TCPStore daemon (an HTTP or other server?)");
    }
    result_.rtt_s = seconds_since(start);
    return true;
  }

  // The ping got no whole echo: something silent, a meshrun daemon's --allow rules, or a hang-up.
  bool no_echo(Io io, const std::string& echo) {
    if (io == Io::kTimeout) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f s", to_seconds(timeout_));
      return fail(ProbeOutcome::kNotStore, where_ + " accepted the TCP connection but sent " +
                                               (echo.empty() ? std::string("nothing") : describe_bytes(echo)) +
                                               " in reply to a store ping within " + secs +
                                               ": something else listens there, not a meshrun/TCPStore daemon");
    }
    if (auto why = rejection_text(numeric_, timeout_)) return rejected(*why);
    return fail(ProbeOutcome::kNotStore,
                where_ + " accepted the TCP connection, then closed it without answering a store ping" +
                    (echo.empty() ? std::string() : " (after sending " + describe_bytes(echo) + ")") +
                    ": not a meshrun/TCPStore daemon");
  }

  // The MESHRUN hello: tells meshrun-rendezvous from a plain TCPStore, and brackets the daemon's wall clock.
  bool hello() {
    const auto start = Clock::now();
    const int64_t wall_before = wall_ms();
    Io io = socket_->send_all(proto::encode_hello_request(), deadline_);
    bool implausible = false;
    std::string text;
    if (io == Io::kOk) text = read_meshrun_reply(*socket_, deadline_, io, implausible);
    const int64_t wall_after = wall_ms();
    if (io != Io::kOk || implausible) {
      return fail(ProbeOutcome::kTcpStore, where_ + " answers store pings but " + hello_failure_verb(io) +
                                               " a meshrun hello: a TCPStore server (e.g. PyTorch's), not "
                                               "meshrun-rendezvous");
    }
    result_.hello_rtt_s = seconds_since(start);
    if (!read_hello(text)) return false;
    result_.skew_s = static_cast<double>(result_.hello->unix_time_ms - (wall_before + wall_after) / 2) / 1000.0;
    result_.outcome = ProbeOutcome::kMeshrun;
    result_.detail = where_ + " is " + result_.hello->server + " " + result_.hello->version +
                     " (it sees this host as " + result_.hello->peer + ")";
    return true;
  }

  // Fills result_.hello from the reply, unless it is not a meshrun daemon's hello.
  bool read_hello(const std::string& text) {
    const auto reply = nlohmann::json::parse(text, nullptr, false);
    if (!reply.is_object()) {
      return fail(ProbeOutcome::kTcpStore, where_ + " answers store pings but its hello reply is not JSON");
    }
    if (reply.contains("error")) return refused_hello(reply["error"]);
    try {
      result_.hello = reply.get<proto::Hello>();
    } catch (const nlohmann::json::exception& e) {
      return fail(ProbeOutcome::kTcpStore, where_ + " sent a malformed hello: " + e.what());
    }
    if (result_.hello->server != proto::kServerName) {
      return fail(ProbeOutcome::kTcpStore,
                  where_ + " answers as '" + result_.hello->server + "', not " + proto::kServerName);
    }
    return true;
  }

  bool refused_hello(const nlohmann::json& error_json) {
    const std::string error = error_json.is_string() ? error_json.get<std::string>() : error_json.dump();
    if (error.find("not allowed") != std::string::npos) return rejected(error);
    return fail(ProbeOutcome::kTcpStore, where_ + " answers store pings but refused a meshrun hello: " + error);
  }

  const Endpoint endpoint_;
  Endpoint numeric_;         // endpoint_ with the host resolved: what is connected to
  const std::string where_;  // endpoint_ as given, for messages
  const Duration timeout_;
  const TimePoint deadline_;  // shared by every step
  std::optional<ProbeSocket> socket_;
  ProbeResult result_;
};

}  // namespace

const char* outcome_name(ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kMeshrun: return "meshrun";
    case ProbeOutcome::kTcpStore: return "tcpstore";
    case ProbeOutcome::kResolve: return "resolve";
    case ProbeOutcome::kRefused: return "refused";
    case ProbeOutcome::kTimeout: return "timeout";
    case ProbeOutcome::kUnreachable: return "unreachable";
    case ProbeOutcome::kNotStore: return "not-a-store";
    case ProbeOutcome::kRejected: return "rejected";
    case ProbeOutcome::kError: return "error";
  }
  return "error";
}

bool answered(ProbeOutcome outcome) { return outcome == ProbeOutcome::kMeshrun || outcome == ProbeOutcome::kTcpStore; }

ProbeResult probe_endpoint(const Endpoint& endpoint, Duration timeout) { return Probe(endpoint, timeout).run(); }

}  // namespace meshrun::diagnostics

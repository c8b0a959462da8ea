#include "proto/store/store_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "proto/store/byte_codec.hpp"
#include "proto/store/reply.hpp"
#include "proto/store/request.hpp"

namespace meshrun::proto {
namespace {

using std::chrono::milliseconds;

int remaining_ms(TimePoint deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1'000'000));
}

std::string seconds_text(Duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", to_seconds(d));
  return buf;
}

// One non-blocking connect to one address, bounded by the deadline.
int try_connect(const addrinfo* ai, TimePoint deadline, int& err) {
  UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!fd.valid()) {
    err = errno;
    return -1;
  }
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return -1;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int rc = 0;
    do {
      rc = ::poll(&p, 1, remaining_ms(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      err = ETIMEDOUT;
      return -1;
    }
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return -1;
  }
  // Still non-blocking here: StoreClient::connect switches to blocking I/O with kernel timeouts, the
  // diagnostics poll() on the socket. Requests are small writes that must leave at once: no Nagle.
  const int flags = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &flags, sizeof flags);
  err = 0;
  return fd.release();
}

void set_socket_timeout(int fd, int option, Duration timeout) {
  const auto us = std::max<int64_t>(1000, std::chrono::duration_cast<std::chrono::microseconds>(timeout).count());
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us % 1'000'000);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

}  // namespace

UniqueFd connect_tcp(const Endpoint& endpoint, TimePoint deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  const int gai = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    throw ConnectError(ConnectFailure::kResolve, "cannot resolve host '" + endpoint.host + "': " + ::gai_strerror(gai) +
                                                     " (check the name, /etc/hosts or DNS; an IP address avoids DNS)");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
  int err = 0;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = try_connect(ai, deadline, err);
    if (fd >= 0) return UniqueFd(fd);
    if (err == ETIMEDOUT) break;
  }
  const std::string where = endpoint.to_string();
  switch (err) {
    case ECONNREFUSED:
      throw ConnectError(ConnectFailure::kRefused, "connection to " + where +
                                                       " refused: nothing is listening there (is the rendezvous "
                                                       "daemon started, and is the port right?)");
    case ETIMEDOUT:
      throw ConnectError(ConnectFailure::kTimeout,
                         "no answer from " + where +
                             " before the deadline (packets are dropped: firewall, wrong interface or route?)");
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EINVAL:
      throw ConnectError(ConnectFailure::kUnreachable, "cannot reach " + where + ": " + std::strerror(err) +
                                                           " (no route to that address from this host)");
    default: throw ConnectError(ConnectFailure::kOther, "cannot connect to " + where + ": " + std::strerror(err));
  }
}

StoreClient StoreClient::connect(const Endpoint& endpoint, const ConnectOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.connect_timeout;
  // Exponential backoff with jitter while the daemon is not up yet (c10d uses the same idea).
  std::mt19937 rng(std::random_device{}());
  auto backoff = milliseconds(50);
  for (;;) {
    try {
      UniqueFd fd = connect_tcp(endpoint, deadline);
      // Blocking I/O with kernel timeouts: a request/response is then one send() and one recv().
      ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
      set_socket_timeout(fd.get(), SO_SNDTIMEO, options.op_timeout);
      StoreClient client(std::move(fd), endpoint, options);
      ByteWriter w;
      w.put_u8(static_cast<uint8_t>(QueryType::kValidate));
      w.put_u32(kValidationMagic);
      client.send_bytes(w.bytes(), deadline);
      client.ping(static_cast<uint32_t>(::getpid()));
      return client;
    } catch (const ConnectError& e) {
      const bool retry = options.retry_refused && e.kind() == ConnectFailure::kRefused;
      if (!retry || std::chrono::steady_clock::now() + backoff >= deadline) throw;
    }
    std::uniform_int_distribution<int64_t> jitter(0, backoff.count() / 2);
    std::this_thread::sleep_for(backoff + milliseconds(jitter(rng)));
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

TimePoint StoreClient::op_deadline() const { return std::chrono::steady_clock::now() + options_.op_timeout; }

// The socket is blocking, so a request/response usually costs one send() and one recv() (replies are
// read through rbuf_). SO_RCVTIMEO tracks each call's deadline, re-set only when it differs noticeably;
// SO_SNDTIMEO stays at the op timeout set by connect(): a send that makes no progress checks its own
// deadline only each time that expires.
void StoreClient::send_bytes(const std::string& bytes, TimePoint deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (std::chrono::steady_clock::now() < deadline) continue;
      throw TimeoutError("timed out sending to " + endpoint_.to_string());
    }
    throw NetworkError("send to " + endpoint_.to_string() + " failed: " + std::strerror(errno));
  }
}

void StoreClient::arm_recv_timeout(TimePoint deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= Duration::zero()) throw TimeoutError("no reply from " + endpoint_.to_string() + " before the deadline");
  const auto slack = std::max<Duration>(std::chrono::milliseconds(20), left / 10);
  if (left + slack < recv_timeout_ || left > recv_timeout_ + slack) {
    set_socket_timeout(fd_.get(), SO_RCVTIMEO, left);
    recv_timeout_ = left;
  }
}

void StoreClient::recv_exact(void* data, size_t size, TimePoint deadline) {
  auto* out = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    if (rpos_ < rbuf_.size()) {
      const size_t take = std::min(size - got, rbuf_.size() - rpos_);
      std::memcpy(out + got, rbuf_.data() + rpos_, take);
      rpos_ += take;
      got += take;
      continue;
    }
    arm_recv_timeout(deadline);
    rbuf_.resize(std::max<size_t>(size - got, 64 * 1024));
    rpos_ = 0;
    const ssize_t n = ::recv(fd_.get(), rbuf_.data(), rbuf_.size(), 0);
    if (n == 0) {
      rbuf_.clear();
      throw NetworkError("connection to " + endpoint_.to_string() +
                         " closed by the peer (the daemon stopped, or it rejected this request)");
    }
    if (n < 0) {
      rbuf_.clear();
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;  // deadline re-checked above
      throw NetworkError("receive from " + endpoint_.to_string() + " failed: " + std::strerror(errno));
    }
    rbuf_.resize(static_cast<size_t>(n));
  }
}

class StoreClient::ReplySource {
 public:
  ReplySource(StoreClient& client, TimePoint deadline) : client_(client), deadline_(deadline) {}
  void read_exact(void* data, size_t size) { client_.recv_exact(data, size, deadline_); }
  std::string peer() const { return client_.endpoint_.to_string(); }

 private:
  StoreClient& client_;
  TimePoint deadline_;
};

void StoreClient::set(const std::string& key, const std::string& value) {
  send_bytes(encode_request({.type = QueryType::kSet, .keys = {key}, .values = {value}, .number = 0}), op_deadline());
}

std::string StoreClient::get(const std::string& key) {
  wait({key});
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kGet, .keys = {key}, .values = {}, .number = 0}), deadline);
  return decode_string(ReplySource(*this, deadline));
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kAdd, .keys = {key}, .values = {}, .number = delta}), deadline);
  return decode_int64(ReplySource(*this, deadline));
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  const auto deadline = op_deadline();
  send_bytes(
      encode_request({.type = QueryType::kCompareSet, .keys = {key}, .values = {expected, desired}, .number = 0}),
      deadline);
  return decode_string(ReplySource(*this, deadline));
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kCheck, .keys = keys, .values = {}, .number = 0}), deadline);
  return decode_status<CheckResponse>(ReplySource(*this, deadline)) == CheckResponse::kReady;
}

void StoreClient::wait(const std::vector<std::string>& keys, std::optional<Duration> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(options_.op_timeout);
  send_bytes(encode_request({.type = QueryType::kWait, .keys = keys, .values = {}, .number = 0}), deadline);
  try {
    const auto reply = decode_status<WaitResponse>(ReplySource(*this, deadline));
    if (reply != WaitResponse::kStopWaiting) {
      throw ProtocolError("unexpected wait reply " + std::to_string(static_cast<int>(reply)) + " from " +
                          endpoint_.to_string());
    }
  } catch (const TimeoutError&) {
    // Withdraw the wait so the connection stays usable; the server answers WAIT_CANCELED (a
    // STOP_WAITING may already be in flight if the key appeared at the last moment).
    const auto cancel_deadline = op_deadline();
    send_bytes(encode_request({.type = QueryType::kCancelWait, .keys = {}, .values = {}, .number = 0}),
               cancel_deadline);
    while (decode_status<WaitResponse>(ReplySource(*this, cancel_deadline)) != WaitResponse::kWaitCanceled) {}
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
    throw TimeoutError("wait for key(s) " + names + " on " + endpoint_.to_string() + " timed out after " +
                       seconds_text(timeout.value_or(options_.op_timeout)));
  }
}

bool StoreClient::delete_key(const std::string& key) {
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kDeleteKey, .keys = {key}, .values = {}, .number = 0}), deadline);
  return decode_int64(ReplySource(*this, deadline)) > 0;
}

int64_t StoreClient::num_keys() {
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kGetNumKeys, .keys = {}, .values = {}, .number = 0}), deadline);
  return decode_int64(ReplySource(*this, deadline));
}

void StoreClient::append(const std::string& key, const std::string& value) {
  send_bytes(encode_request({.type = QueryType::kAppend, .keys = {key}, .values = {value}, .number = 0}),
             op_deadline());
}

std::vector<std::string> StoreClient::multi_get(const std::vector<std::string>& keys) {
  wait(keys);
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kMultiGet, .keys = keys, .values = {}, .number = 0}), deadline);
  return decode_strings(ReplySource(*this, deadline), keys.size());
}

void StoreClient::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) throw UsageError("multi_set: keys and values differ in length");
  send_bytes(encode_request({.type = QueryType::kMultiSet, .keys = keys, .values = values, .number = 0}),
             op_deadline());
}

void StoreClient::ping(uint32_t nonce) {
  const auto deadline = op_deadline();
  send_bytes(encode_request({.type = QueryType::kPing, .keys = {}, .values = {}, .number = nonce}), deadline);
  if (decode_nonce(ReplySource(*this, deadline)) != nonce) {
    throw ProtocolError(endpoint_.to_string() + " answered a ping with the wrong nonce: not a TCPStore server");
  }
}

nlohmann::json StoreClient::meshrun(const nlohmann::json& request, std::optional<Duration> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(options_.op_timeout);
  send_bytes(encode_request({.type = QueryType::kMeshrun, .keys = {}, .values = {request.dump()}, .number = 0}),
             deadline);
  const std::string text = decode_string(ReplySource(*this, deadline));
  auto reply = nlohmann::json::parse(text, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    throw ProtocolError("malformed reply from " + endpoint_.to_string() + " to '" +
                        request.value("op", std::string("?")) + "'");
  }
  if (reply.contains("error")) throw RemoteError(reply["error"].get<std::string>());
  return reply;
}

}  // namespace meshrun::proto

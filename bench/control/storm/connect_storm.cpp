// connect_storm: N simulated ranks start at once against a TCPStore-protocol server and do what a PyTorch
// rank does at start-up: connect, VALIDATE + PING (the bytes torch's client sends on connect), SET a key of
// their own, then torch.distributed.elastic's store barrier (ADD 1 on a counter; the rank that brings it
// to N sets the release key; every rank WAITs on that key). One process drives every socket, non-blocking,
// through epoll, so the figure is the server's and not thread scheduling's. Sockets are spread over
// several 127.77.x.y source addresses (bound before connect, the port left to connect) so ephemeral ports
// do not run out. The same program measures meshrun-rendezvous and PyTorch's libuv server.
//
//   connect_storm HOST:PORT RANKS [SOURCES] [TIMEOUT_S]      (SOURCES 0 or none: one per 4096 ranks, >= 4)
//
// Prints one line: ranks connected_s released_s released refused reset timeout other retries client_cpu_s
//   connected_s  until the last rank had its PING answered     released_s  until the last WAIT returned
//   refused, reset, timeout, other  connection failures by kind (ECONNREFUSED; ECONNRESET, EPIPE or EOF;
//                ETIMEDOUT; anything else). A rank that fails before it sent its ADD reconnects with
//                backoff (retries counts those), as torch's client does; after it the rank is lost.
//   A rank not released within TIMEOUT_S (default 300) is counted in ranks - released.
//   client_cpu_s  this program's own CPU time (user + system): on a small machine it competes with the server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "proto/store/reply.hpp"
#include "proto/store/request.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using meshrun::proto::QueryType;

constexpr int kStartBatch = 256;       // new connections started per turn of the event loop
constexpr size_t kSpareFds = 64;       // descriptors beyond one per rank (epoll, stdio, libraries)
constexpr int kRanksPerSource = 4096;  // default spread over source addresses

// Where a rank is in its start-up. Each phase after kConnecting waits for a reply of a fixed size.
enum class Phase : uint8_t {
  kIdle,        // not started yet, or waiting for its reconnect time
  kConnecting,  // connect() in progress
  kValidating,  // VALIDATE + PING sent: waits for the 4-byte nonce
  kCounting,    // SET + ADD sent: waits for the 8-byte counter value
  kWaiting,     // WAIT on the release key sent: waits for the 1-byte status
  kReleased,
  kLost,  // failed after its ADD: retrying could count it twice
};

size_t reply_size(Phase phase) {
  switch (phase) {
    case Phase::kValidating: return 4;
    case Phase::kCounting: return 8;
    case Phase::kWaiting: return 1;
    default: return 0;
  }
}

struct Rank {
  int fd = -1;
  Phase phase = Phase::kIdle;
  uint8_t have = 0;  // reply bytes received in this phase
  int attempts = 0;  // connection attempts so far
  char reply[8] = {};
};

struct Counts {
  int connected = 0;
  int released = 0;
  int lost = 0;
  int refused = 0;
  int reset = 0;
  int timeout = 0;
  int other = 0;
  int retries = 0;
  Clock::time_point last_connected{};
  Clock::time_point last_released{};
};

// A reply already in memory, read through the decode_* functions of proto/store/reply.hpp.
struct MemorySource {
  const char* data;
  size_t size;
  void read_exact(void* out, size_t n) {
    if (n > size) throw meshrun::ProtocolError("short reply");
    std::memcpy(out, data, n);
    data += n;
    size -= n;
  }
  std::string peer() const { return "server"; }
};

std::string encode(QueryType type, std::vector<std::string> keys, std::vector<std::string> values, int64_t number) {
  meshrun::proto::Request r;
  r.type = type;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return meshrun::proto::encode_request(r);
}

class Storm {
 public:
  Storm(const sockaddr_in& server, std::vector<in_addr> sources, int ranks)
      : server_(server),
        sources_(std::move(sources)),
        ranks_(static_cast<size_t>(ranks)),
        n_(ranks),
        prefix_("/storm/" + std::to_string(::getpid()) + "/"),
        counter_key_(prefix_ + "count"),
        release_key_(prefix_ + "release") {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) die("epoll_create1");
  }

  /// Runs until every rank is released or lost, or until `timeout`.
  const Counts& run(std::chrono::seconds timeout) {
    start_ = Clock::now();
    const auto deadline = start_ + timeout;
    std::vector<epoll_event> events(4096);
    size_t next = 0;
    while (counts_.released + counts_.lost < n_ && Clock::now() < deadline) {
      for (int i = 0; i < kStartBatch && next < ranks_.size(); ++i) connect_rank(next++);
      while (!retry_.empty() && retry_.top().first <= Clock::now()) {
        const int r = retry_.top().second;
        retry_.pop();
        connect_rank(static_cast<size_t>(r));
      }
      int wait_ms = 50;
      if (next < ranks_.size()) {
        wait_ms = 0;
      } else if (!retry_.empty()) {
        const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(retry_.top().first - Clock::now());
        wait_ms = static_cast<int>(std::clamp<int64_t>(until.count(), 0, 50));
      }
      const int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), wait_ms);
      if (n < 0 && errno != EINTR) die("epoll_wait");
      for (int i = 0; i < n; ++i)
        on_event(events[static_cast<size_t>(i)].data.u64, events[static_cast<size_t>(i)].events);
    }
    return counts_;
  }

  double seconds_until(Clock::time_point t) const {
    return t < start_ ? 0.0 : std::chrono::duration<double>(t - start_).count();
  }

 private:
  [[noreturn]] static void die(const char* what) {
    std::fprintf(stderr, "connect_storm: %s: %s\n", what, std::strerror(errno));
    std::exit(3);
  }

  void connect_rank(size_t r) {
    Rank& rank = ranks_[r];
    rank.attempts++;
    rank.have = 0;
    rank.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (rank.fd < 0) die("socket");
    const int one = 1;
    // The source address alone is bound; connect() picks the port per destination, so each source
    // address offers the whole ephemeral range to every server port.
    ::setsockopt(rank.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    ::setsockopt(rank.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr = sources_[r % sources_.size()];
    if (::bind(rank.fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) die("bind");
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = r;
    if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, rank.fd, &ev) != 0) die("epoll_ctl");
    rank.phase = Phase::kConnecting;
    if (::connect(rank.fd, reinterpret_cast<const sockaddr*>(&server_), sizeof server_) != 0 && errno != EINPROGRESS) {
      fail(r, errno);
    }
  }

  void on_event(uint64_t r, uint32_t events) {
    Rank& rank = ranks_[r];
    if (rank.fd < 0) return;  // closed earlier in this batch of events
    if (rank.phase == Phase::kConnecting) {
      if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(rank.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return fail(r, err);
      // What torch's client sends on connect: VALIDATE (magic), then PING with a nonce it checks.
      send(r,
           encode(QueryType::kValidate, {}, {}, meshrun::proto::kValidationMagic) +
               encode(QueryType::kPing, {}, {}, static_cast<int64_t>(r)),
           Phase::kValidating);
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) receive(r);
  }

  // Reads until the socket is drained (edge-triggered); each complete reply moves the rank on.
  void receive(uint64_t r) {
    Rank& rank = ranks_[r];
    while (rank.fd >= 0) {
      const size_t need = reply_size(rank.phase);
      if (need == 0) {  // released: nothing more is expected; a close now is the server's business
        char sink[64];
        const ssize_t n = ::recv(rank.fd, sink, sizeof sink, 0);
        if (n <= 0) return;
        continue;
      }
      const ssize_t n = ::recv(rank.fd, rank.reply + rank.have, need - rank.have, 0);
      if (n == 0) return fail(r, ECONNRESET);  // the server closed the connection
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        return fail(r, errno);
      }
      rank.have = static_cast<uint8_t>(rank.have + n);
      if (rank.have == need) advance(r);
    }
  }

  void advance(uint64_t r) {
    Rank& rank = ranks_[r];
    MemorySource reply{rank.reply, rank.have};
    rank.have = 0;
    const auto now = Clock::now();
    switch (rank.phase) {
      case Phase::kValidating: {
        if (meshrun::proto::decode_nonce(reply) != static_cast<uint32_t>(r)) return fail(r, EPROTO);
        counts_.connected++;
        counts_.last_connected = now;
        const std::string key = prefix_ + std::to_string(r);
        send(r, encode(QueryType::kSet, {key}, {"127.0.0.1:29500"}, 0) + encode(QueryType::kAdd, {counter_key_}, {}, 1),
             Phase::kCounting);
        return;
      }
      case Phase::kCounting: {
        const int64_t arrived = meshrun::proto::decode_int64(reply);
        std::string out;
        if (arrived == n_) out = encode(QueryType::kSet, {release_key_}, {"1"}, 0);  // the last one in releases
        send(r, out + encode(QueryType::kWait, {release_key_}, {}, 0), Phase::kWaiting);
        return;
      }
      case Phase::kWaiting: {
        using meshrun::proto::WaitResponse;
        if (meshrun::proto::decode_status<WaitResponse>(reply) != WaitResponse::kStopWaiting) return fail(r, EPROTO);
        rank.phase = Phase::kReleased;
        counts_.released++;
        counts_.last_released = now;
        return;
      }
      default: return;
    }
  }

  // The requests are small and the socket's buffer holds nothing else, so one send takes them whole.
  void send(uint64_t r, const std::string& bytes, Phase next) {
    Rank& rank = ranks_[r];
    const ssize_t n = ::send(rank.fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(bytes.size())) return fail(r, n < 0 ? errno : EMSGSIZE);
    rank.phase = next;
  }

  void fail(uint64_t r, int err) {
    Rank& rank = ranks_[r];
    switch (err) {
      case ECONNREFUSED: counts_.refused++; break;
      case ECONNRESET:
      case EPIPE: counts_.reset++; break;
      case ETIMEDOUT: counts_.timeout++; break;
      default: counts_.other++; break;
    }
    ::close(rank.fd);  // also leaves the epoll set
    rank.fd = -1;
    if (rank.phase == Phase::kConnecting || rank.phase == Phase::kValidating) {
      // Reconnect later, as torch's client does: 0.5 s x 1.5^attempt, +-50 % jitter, at most 10 s.
      const double base = std::min(10.0, 0.5 * std::pow(1.5, rank.attempts - 1));
      const double delay = base * std::uniform_real_distribution<double>(0.5, 1.5)(rng_);
      rank.phase = Phase::kIdle;
      counts_.retries++;
      retry_.emplace(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay)),
                     static_cast<int>(r));
    } else {
      rank.phase = Phase::kLost;
      counts_.lost++;
    }
  }

  using Retry = std::pair<Clock::time_point, int>;
  sockaddr_in server_;
  std::vector<in_addr> sources_;
  std::vector<Rank> ranks_;
  int n_;
  std::string prefix_;  // keys of this run: a server that already saw a storm still counts from zero
  std::string counter_key_;
  std::string release_key_;
  int epoll_ = -1;
  Clock::time_point start_{};
  Counts counts_;
  std::priority_queue<Retry, std::vector<Retry>, std::greater<Retry>> retry_;
  std::mt19937 rng_{12345};
};

// One descriptor per rank: lift the soft limit to the hard one, and say so when even that is too low.
bool raise_fd_limit(size_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur >= needed) return true;
  std::fprintf(stderr, "connect_storm: %zu ranks need %zu open files; the hard limit (ulimit -Hn) is %llu\n",
               needed - kSpareFds, needed, static_cast<unsigned long long>(limit.rlim_max));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: connect_storm HOST:PORT RANKS [SOURCES] [TIMEOUT_S]\n");
    return 2;
  }
  const auto ep = meshrun::parse_endpoint(argv[1], 29400);
  const int ranks = std::stoi(argv[2]);
  int sources = argc > 3 ? std::stoi(argv[3]) : 0;
  if (sources == 0) sources = std::max(4, (ranks + kRanksPerSource - 1) / kRanksPerSource);
  const auto timeout = std::chrono::seconds(argc > 4 ? std::stoi(argv[4]) : 300);
  if (ranks < 1 || sources < 1 || sources > 250 * 250) {
    std::fprintf(stderr, "connect_storm: RANKS must be >= 1 and SOURCES 1..62500\n");
    return 2;
  }
  if (!raise_fd_limit(static_cast<size_t>(ranks) + kSpareFds)) return 2;
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(ep.port);
  if (::inet_pton(AF_INET, ep.host.c_str(), &server.sin_addr) != 1) {
    std::fprintf(stderr, "connect_storm: %s is not an IPv4 address\n", ep.host.c_str());
    return 2;
  }
  // 127.77.0.1, 127.77.0.2, ...: every 127/8 address is local on Linux's loopback.
  std::vector<in_addr> source_addrs;
  for (int s = 0; s < sources; ++s) {
    in_addr a{};
    a.s_addr =
        htonl((127u << 24) | (77u << 16) | (static_cast<uint32_t>(s / 250) << 8) | static_cast<uint32_t>(s % 250 + 1));
    source_addrs.push_back(a);
  }
  Storm storm(server, std::move(source_addrs), ranks);
  const Counts& c = storm.run(timeout);
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const double cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  std::printf("%d %.3f %.3f %d %d %d %d %d %d %.2f\n", ranks, storm.seconds_until(c.last_connected),
              storm.seconds_until(c.last_released), c.released, c.refused, c.reset, c.timeout, c.other, c.retries,
              cpu_s);
  return c.released == ranks ? 0 : 1;
}

#include "diagnostics/peers/pair_measurement.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "diagnostics/ping/sample_stats.hpp"

namespace meshrun::diagnostics {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kPairMagic = 0x6d724257;  // "mrBW"
constexpr uint32_t kChunkBytes = 1u << 20;

// Fixed-layout messages: both ends run the same meshrun build (the hello's magic guards the rest).
struct Hello {
  uint32_t magic = kPairMagic;
  uint32_t round = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  uint64_t session = 0;
};
struct Figures {
  double gbps = 0;  // what this end sent, as it timed it
  uint64_t bytes = 0;
  double rtt_min_us = 0;  // the client's ping-pong; zero from the server
  double rtt_avg_us = 0;
  double rtt_max_us = 0;
};
static_assert(std::is_trivially_copyable_v<Hello> && std::is_trivially_copyable_v<Figures>);

std::vector<char> payload() {
  // Incompressible bytes, in case a link or tunnel compresses.
  std::vector<char> buf(sizeof(uint32_t) + kChunkBytes);
  std::mt19937_64 rng(7);
  for (auto& c : buf) c = static_cast<char>(rng());
  return buf;
}

// Sends frames for at most spec.bytes / spec.max_transfer, then the end frame; returns the figures as
// the receiver acknowledged them.
Figures send_bulk(PeerSocket& s, const PairSpec& spec, TimePoint deadline) {
  auto buf = payload();
  const auto start = SteadyClock::now();
  uint64_t sent = 0;
  while (sent < spec.bytes && SteadyClock::now() - start < spec.max_transfer) {
    const auto len = static_cast<uint32_t>(std::min<uint64_t>(kChunkBytes, spec.bytes - sent));
    std::memcpy(buf.data(), &len, sizeof len);
    s.send_all(buf.data(), sizeof len + len, deadline);
    sent += len;
  }
  const uint32_t end = 0;
  s.send_all(&end, sizeof end, deadline);
  uint64_t received = 0;
  s.recv_all(&received, sizeof received, deadline);
  const double seconds = to_seconds(SteadyClock::now() - start);
  if (received != sent) {
    throw ProtocolError(s.peer() + " received " + std::to_string(received) + " of " + std::to_string(sent) + " bytes");
  }
  Figures f;
  f.bytes = sent;
  f.gbps = seconds > 0 ? static_cast<double>(sent) / seconds / 1e9 : 0;
  return f;
}

void receive_bulk(PeerSocket& s, TimePoint deadline) {
  std::vector<char> buf(kChunkBytes);
  uint64_t received = 0;
  for (;;) {
    uint32_t len = 0;
    s.recv_all(&len, sizeof len, deadline);
    if (len == 0) break;
    if (len > kChunkBytes) throw ProtocolError(s.peer() + " sent a " + std::to_string(len) + "-byte frame");
    s.recv_all(buf.data(), len, deadline);
    received += len;
  }
  s.send_all(&received, sizeof received, deadline);
}

PairResult combine(const PairSpec& spec, const Figures& from_a, const Figures& from_b) {
  PairResult r;
  r.a = spec.a;
  r.b = spec.b;
  r.round = spec.round;
  r.ok = true;
  r.a_to_b_gbps = from_a.gbps;
  r.a_to_b_bytes = from_a.bytes;
  r.b_to_a_gbps = from_b.gbps;
  r.b_to_a_bytes = from_b.bytes;
  r.rtt_min_us = from_a.rtt_min_us;
  r.rtt_avg_us = from_a.rtt_avg_us;
  r.rtt_max_us = from_a.rtt_max_us;
  return r;
}

}  // namespace

uint64_t session_tag(const std::string& session) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : session) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

PairResult run_pair_client(PeerSocket& s, const PairSpec& spec, TimePoint deadline) {
  Hello hello;
  hello.round = static_cast<uint32_t>(spec.round);
  hello.from = static_cast<uint32_t>(spec.a);
  hello.to = static_cast<uint32_t>(spec.b);
  hello.session = spec.session_tag;
  s.send_all(&hello, sizeof hello, deadline);
  uint8_t accepted = 0;
  s.recv_all(&accepted, sizeof accepted, deadline);

  std::vector<double> rtts;
  for (int i = 0; i < spec.pings; ++i) {
    uint64_t ping = static_cast<uint64_t>(i);
    uint64_t pong = 0;
    const auto t0 = SteadyClock::now();
    s.send_all(&ping, sizeof ping, deadline);
    s.recv_all(&pong, sizeof pong, deadline);
    rtts.push_back(to_seconds(SteadyClock::now() - t0) * 1e6);
    if (pong != ping)
      throw ProtocolError(s.peer() + " echoed " + std::to_string(pong) + " for ping " + std::to_string(ping));
  }
  Figures mine = send_bulk(s, spec, deadline);
  receive_bulk(s, deadline);
  const auto stats = compute_stats(rtts);
  mine.rtt_min_us = stats.min;
  mine.rtt_avg_us = stats.avg;
  mine.rtt_max_us = stats.max;
  s.send_all(&mine, sizeof mine, deadline);
  Figures theirs;
  s.recv_all(&theirs, sizeof theirs, deadline);
  return combine(spec, mine, theirs);
}

bool accept_pair_hello(PeerSocket& s, const PairSpec& spec, TimePoint deadline) {
  Hello hello;
  s.recv_all(&hello, sizeof hello, deadline);
  if (hello.magic != kPairMagic || hello.session != spec.session_tag ||
      hello.round != static_cast<uint32_t>(spec.round) || hello.from != static_cast<uint32_t>(spec.a) ||
      hello.to != static_cast<uint32_t>(spec.b)) {
    return false;
  }
  const uint8_t accepted = 1;
  s.send_all(&accepted, sizeof accepted, deadline);
  return true;
}

PairResult run_pair_server(PeerSocket& s, const PairSpec& spec, TimePoint deadline) {
  for (int i = 0; i < spec.pings; ++i) {
    uint64_t ping = 0;
    s.recv_all(&ping, sizeof ping, deadline);
    s.send_all(&ping, sizeof ping, deadline);
  }
  receive_bulk(s, deadline);
  Figures mine = send_bulk(s, spec, deadline);
  Figures theirs;
  s.recv_all(&theirs, sizeof theirs, deadline);
  s.send_all(&mine, sizeof mine, deadline);
  return combine(spec, theirs, mine);
}

}  // namespace meshrun::diagnostics

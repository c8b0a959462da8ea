// The real daemon (in-process, 127.0.0.1, port 0) driven by our client over real sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <thread>

#include "common/error.hpp"
#include "proto/store/byte_codec.hpp"
#include "proto/store/request.hpp"
#include "tests/support/daemon.hpp"
#include "tests/support/skip.hpp"

using namespace meshrun;
using namespace std::chrono_literals;

namespace {
// A raw TCP connection for sending bytes no well-behaved client would send.
struct RawSocket {
  /// From `source` (another loopback address stands for another client host).
  explicit RawSocket(uint16_t port, const char* source = "127.0.0.1") {
    fd.reset(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void send(const std::string& bytes) { ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  /// True when the daemon closed the connection (EOF) within 5 s.
  bool closed_by_peer() {
    char buf[64];
    for (;;) {
      const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }
  /// True when the daemon answers a PING on this connection (served, not closed).
  bool answers_ping() {
    send(proto::encode_request({proto::QueryType::kPing, {}, {}, 42}));
    return receives_reply();
  }
  /// True when a reply's bytes arrive (within 5 s), not the hang-up.
  bool receives_reply() {
    char buf[64];
    return ::recv(fd.get(), buf, sizeof buf, 0) > 0;
  }
  /// True when a byte or the hang-up arrives within `limit`.
  bool readable_within(std::chrono::milliseconds limit) {
    pollfd p{fd.get(), POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(limit.count())) > 0;
  }
  UniqueFd fd;
};

// Waits (bounded) until the daemon reports `n` open connections; the status client's own included.
bool wait_connections(proto::RendezvousClient& status, int n) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (status.status().connections != n) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Raises the soft open-files limit to the hard one for tests holding hundreds of sockets (both ends are
// in this process); the common 1,024 default is too low for them. Restored on destruction.
class OpenFilesLimit {
 public:
  explicit OpenFilesLimit(rlim_t needed) {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    rlimit raised = saved_;
    raised.rlim_cur = std::max(saved_.rlim_cur, std::min(needed, saved_.rlim_max));
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  ~OpenFilesLimit() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
  OpenFilesLimit(const OpenFilesLimit&) = delete;
  OpenFilesLimit& operator=(const OpenFilesLimit&) = delete;
  rlim_t current() const {
    rlimit now{};
    ::getrlimit(RLIMIT_NOFILE, &now);
    return now.rlim_cur;
  }

 private:
  rlimit saved_{};
};
}  // namespace

TEST_CASE("every store operation works over the wire", "[server]") {
  testing::TestDaemon daemon;
  auto c = daemon.client();
  c.set("/a", "1");
  CHECK(c.get("/a") == "1");
  CHECK(c.add("/n", 5) == 5);
  CHECK(c.add("/n", -2) == 3);
  CHECK(c.compare_set("/a", "1", "2") == "2");
  CHECK(c.compare_set("/a", "9", "3") == "2");
  CHECK(c.check({"/a", "/n"}));
  CHECK_FALSE(c.check({"/a", "/missing"}));
  c.append("/ap", "x");
  c.append("/ap", "y");
  CHECK(c.get("/ap") == "xy");
  c.multi_set({"/m1", "/m2"}, {"v1", "v2"});
  CHECK(c.multi_get({"/m1", "/m2"}) == std::vector<std::string>{"v1", "v2"});
  CHECK(c.num_keys() == 5);
  CHECK(c.delete_key("/a"));
  CHECK_FALSE(c.delete_key("/a"));
  CHECK(c.num_keys() == 4);
  c.ping(99);
}

TEST_CASE("a wait blocks until another client sets the key", "[server]") {
  testing::TestDaemon daemon;
  auto waiter = daemon.client();
  std::atomic<bool> set_done{false};
  std::thread setter([&] {
    auto c = daemon.client();
    std::this_thread::sleep_for(200ms);
    set_done = true;
    c.set("/late", "here");
  });
  waiter.wait({"/late"}, 10s);
  CHECK(set_done.load());
  CHECK(waiter.get("/late") == "here");
  setter.join();
}

TEST_CASE("a wait that times out leaves the connection usable", "[server]") {
  testing::TestDaemon daemon;
  auto c = daemon.client();
  CHECK_THROWS_AS(c.wait({"/never"}, 200ms), TimeoutError);
  c.set("/after", "ok");
  CHECK(c.get("/after") == "ok");
}

TEST_CASE("garbage, truncated and oversized input closes only that connection", "[server]") {
  testing::TestDaemon daemon;
  auto good = daemon.client();
  good.set("/k", "v");
  SECTION("unknown query type") {
    RawSocket raw(daemon.endpoint().port);
    raw.send("\xff\xfe garbage");
    CHECK(raw.closed_by_peer());
  }
  SECTION("oversized value length") {
    RawSocket raw(daemon.endpoint().port);
    proto::ByteWriter w;
    w.put_u8(static_cast<uint8_t>(proto::QueryType::kSet));
    w.put_string("/k");
    w.put_u64(uint64_t{1} << 40);
    raw.send(w.bytes());
    CHECK(raw.closed_by_peer());
  }
  SECTION("wrong validation magic") {
    RawSocket raw(daemon.endpoint().port);
    raw.send(proto::encode_request({proto::QueryType::kValidate, {}, {}, 0x12345678}));
    CHECK(raw.closed_by_peer());
  }
  SECTION("truncated message then hang-up") {
    auto status = daemon.rendezvous();
    const int before = status.status().connections;
    RawSocket raw(daemon.endpoint().port);
    raw.send(std::string("\x01\x10\0\0", 4));  // SET, then 4 of the 8 bytes of the key length
    CHECK(wait_connections(status, before + 1));
    // The daemon waits for the rest: no reply and no hang-up for half a message.
    CHECK_FALSE(raw.readable_within(200ms));
    raw.fd.reset();
    // The half-read session is released when the client goes away.
    CHECK(wait_connections(status, before));
  }
  SECTION("meshrun request that is not JSON") {
    RawSocket raw(daemon.endpoint().port);
    raw.send(proto::encode_request({proto::QueryType::kMeshrun, {}, {"{not json"}, 0}));
    CHECK(raw.closed_by_peer());
  }
  // The daemon keeps serving everyone else.
  CHECK(good.get("/k") == "v");
  CHECK(daemon.client().get("/k") == "v");
}

TEST_CASE("APPEND cannot grow one key past the value cap, and the daemon keeps serving", "[server]") {
  auto options = testing::TestDaemon::default_options();
  options.limits.max_value_bytes = 4096;
  testing::TestDaemon daemon(options);
  auto good = daemon.client();
  good.set("/k", "v");
  auto greedy = daemon.client();
  const std::string chunk(1000, 'x');
  for (int i = 0; i < 4; ++i) greedy.append("/grow", chunk);  // 4,000 bytes: within the cap
  CHECK(good.get("/grow").size() == 4000);
  // The fifth would make 5,000: each APPEND fits a message, their sum does not fit a value.
  // APPEND has no reply: the daemon closes the connection, which the client's next request finds.
  try {
    greedy.append("/grow", chunk);
  } catch (const std::exception&) {}
  CHECK_THROWS(greedy.get("/grow"));
  CHECK(good.get("/grow").size() == 4000);
  CHECK(good.get("/k") == "v");
  CHECK(daemon.client().get("/k") == "v");
}

TEST_CASE("one address cannot hold more connections than its cap, nor wait on more keys, and others are served",
          "[server][limits]") {
  auto options = testing::TestDaemon::default_options();
  options.limits.max_connections_per_peer = 4;
  options.limits.max_waited_keys_per_peer = 100;
  testing::TestDaemon daemon(options);
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) keys.push_back("/wait/" + std::to_string(i));
  const std::string wait_request = proto::encode_request({proto::QueryType::kWait, keys, {}, 0});
  {
    // 127.0.0.1 holds its four: a fifth is closed at once; 127.0.0.2 is served meanwhile.
    std::vector<RawSocket> held;
    for (int i = 0; i < 4; ++i) {
      held.emplace_back(daemon.endpoint().port);
      CHECK(held.back().answers_ping());
    }
    RawSocket fifth(daemon.endpoint().port);
    CHECK(fifth.closed_by_peer());
    RawSocket other(daemon.endpoint().port, "127.0.0.2");
    CHECK(other.answers_ping());
    // Waits: 60 keys park; 60 more from the same address (another connection) would make 120: closed. Another
    // address's 60 park.
    held[0].send(wait_request);
    held[1].send(wait_request);
    CHECK(held[1].closed_by_peer());
    other.send(wait_request);
    RawSocket setter(daemon.endpoint().port, "127.0.0.3");
    for (const auto& key : keys) setter.send(proto::encode_request({proto::QueryType::kSet, {key}, {"v"}, 0}));
    CHECK(held[0].receives_reply());  // parked, then woken: not closed
    CHECK(other.receives_reply());
    // The woken wait's keys count no more: the address may wait on 60 again.
    held[2].send(wait_request);
    CHECK(held[2].receives_reply());  // the keys exist: answered at once
  }
  // The address's connections closed: it is served again.
  bool served = false;
  for (int i = 0; i < 500 && !served; ++i) {
    RawSocket again(daemon.endpoint().port);
    served = again.answers_ping();
    if (!served) std::this_thread::sleep_for(10ms);
  }
  CHECK(served);
}

// The process's peak resident memory (VmHWM) in bytes, after `reset_peak` (clear_refs 5) zeroed it.
size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

TEST_CASE("a client that pipelines GETs and does not read the replies cannot grow the daemon's memory",
          "[server][backlog]") {
  auto options = testing::TestDaemon::default_options();
  options.limits.max_reply_backlog_bytes = 2 * 1024 * 1024;
  testing::TestDaemon daemon(options);
  const std::string value(256 * 1024, 'v');
  auto writer = daemon.client();
  writer.set("/big", value);
  REQUIRE(writer.get("/big") == value);  // stored before the pipeline below reads it
  constexpr int kGets = 2000;            // 500 MiB of replies if the daemon queued them all
  std::string requests;
  for (int i = 0; i < kGets; ++i) requests += proto::encode_request({proto::QueryType::kGet, {"/big"}, {}, 0});
  requests += proto::encode_request({proto::QueryType::kSet, {"/after-the-gets"}, {"1"}, 0});
  reset_peak();
  const size_t before = peak_rss_bytes();
  RawSocket raw(daemon.endpoint().port);
  raw.send(requests);
  // While that client reads nothing, everyone else is served, and its requests past the backlog wait:
  // the SET behind its 2000 GETs has not happened.
  std::this_thread::sleep_for(300ms);
  auto other = daemon.client();
  CHECK(other.get("/big").size() == value.size());
  CHECK_FALSE(other.check({"/after-the-gets"}));
  // Then it reads: every reply arrives, whole and in order (nothing dropped).
  size_t received = 0;
  std::vector<char> buf(1 << 20);
  while (received < static_cast<size_t>(kGets) * (8 + value.size())) {
    const ssize_t n = ::recv(raw.fd.get(), buf.data(), buf.size(), 0);
    INFO("received " << received << " of " << static_cast<size_t>(kGets) * (8 + value.size()) << " bytes");
    REQUIRE(n > 0);
    received += static_cast<size_t>(n);
  }
  CHECK(received == static_cast<size_t>(kGets) * (8 + value.size()));
  CHECK(other.get("/after-the-gets") == "1");  // handled once the replies drained
  const size_t growth = peak_rss_bytes() - before;
  INFO("peak resident memory grew by " << growth / (1024 * 1024) << " MiB");
#ifndef __SANITIZE_ADDRESS__           // ASan keeps freed memory in quarantine (256 MiB): peak RSS says nothing there
  CHECK(growth < 100u * 1024 * 1024);  // the cap (2 MiB) plus a reply in flight, not the 500 MiB asked for
#endif
}

TEST_CASE("500 concurrent clients blocked in waits are all served", "[server][scale]") {
  constexpr int kClients = 500;
  // Each client holds two descriptors here (its socket and the daemon's end), plus the threads' and Catch's.
  OpenFilesLimit limit(4 * kClients);
  REQUIRE(limit.current() >= 2 * kClients + 64);
  testing::TestDaemon daemon;
  std::vector<proto::StoreClient> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) clients.push_back(daemon.client());
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      clients[static_cast<size_t>(i)].add("/arrived", 1);
      clients[static_cast<size_t>(i)].wait({"/go"}, 60s);
      ++released;
    });
  }
  // While 500 waits are pending another client is served at once.
  auto other = daemon.client();
  other.wait({"/arrived"}, 10s);
  other.set("/unrelated", "x");
  CHECK(other.get("/unrelated") == "x");
  while (other.add("/arrived", 0) < kClients) std::this_thread::sleep_for(10ms);
  other.set("/go", "1");
  for (auto& t : threads) t.join();
  CHECK(released.load() == kClients);
}

TEST_CASE("rendezvous over the wire assigns ranks and a private store per run", "[server][rendezvous]") {
  testing::TestDaemon daemon;
  auto make_join = [](const std::string& host, const std::string& run) {
    proto::JoinRequest r;
    r.run_id = run;
    r.host = host;
    r.addr = "127.0.0.1";
    r.local_world_size = 2;
    r.min_nodes = 2;
    r.max_nodes = 2;
    r.pid = ::getpid();
    return r;
  };
  std::vector<proto::AwaitReply> replies(2);
  std::vector<std::thread> agents;
  for (int i = 0; i < 2; ++i) {
    agents.emplace_back([&, i] {
      auto rdzv = daemon.rendezvous();
      const auto id = rdzv.join(make_join("host-" + std::to_string(i), "run-a"));
      for (;;) {
        replies[static_cast<size_t>(i)] = rdzv.await("run-a", id, 2s);
        if (replies[static_cast<size_t>(i)].status != proto::AwaitStatus::kWaiting) break;
      }
    });
  }
  for (auto& t : agents) t.join();
  REQUIRE(replies[0].status == proto::AwaitStatus::kAssigned);
  REQUIRE(replies[1].status == proto::AwaitStatus::kAssigned);
  CHECK(replies[0].assignment.group_rank + replies[1].assignment.group_rank == 1);
  CHECK(replies[0].assignment.world_size == 4);
  CHECK(replies[0].assignment.master_addr == "127.0.0.1");
  const int port = replies[0].assignment.master_port;
  REQUIRE(port > 0);
  CHECK(port != daemon.endpoint().port);
  // The run's store is isolated from the shared one.
  proto::ConnectOptions o;
  auto run_store = proto::StoreClient::connect(Endpoint{"127.0.0.1", static_cast<uint16_t>(port)}, o);
  run_store.set("/worker/key", "x");
  auto shared = daemon.client();
  CHECK_FALSE(shared.check({"/worker/key"}));
  CHECK(run_store.check({"/worker/key"}));

  auto status = daemon.rendezvous().status();
  REQUIRE(status.runs.size() == 1);
  CHECK(status.runs[0].run_id == "run-a");
  CHECK(status.runs[0].state == proto::RunState::kClosed);
  CHECK(status.runs[0].keys == 1);
}

TEST_CASE("each round gets a fresh workers' store on a new port, the last round's keeps its keys",
          "[server][rendezvous]") {
  testing::TestDaemon daemon;
  proto::JoinRequest r;
  r.run_id = "restarts";
  r.host = "alpha";
  r.addr = "127.0.0.1";
  r.pid = ::getpid();
  auto rdzv = daemon.rendezvous();
  const auto assigned = [&](const std::string& node) {
    auto reply = rdzv.await(r.run_id, node, 5s);
    REQUIRE(reply.status == proto::AwaitStatus::kAssigned);
    return reply.assignment;
  };
  const auto node = rdzv.join(r);
  const auto first = assigned(node);
  REQUIRE(first.master_port > 0);
  proto::ConnectOptions o;
  auto old_store = proto::StoreClient::connect(Endpoint{"127.0.0.1", static_cast<uint16_t>(first.master_port)}, o);
  old_store.set("default_pg/0//cpu/rank_1", "an address of attempt 0");

  rdzv.report_failure(r.run_id, node, "worker died");
  const auto second = assigned(rdzv.join(r));
  CHECK(second.round == first.round + 1);
  REQUIRE(second.master_port > 0);
  CHECK(second.master_port != first.master_port);
  auto new_store = proto::StoreClient::connect(Endpoint{"127.0.0.1", static_cast<uint16_t>(second.master_port)}, o);
  CHECK_FALSE(new_store.check({"default_pg/0//cpu/rank_1"}));
  CHECK(old_store.get("default_pg/0//cpu/rank_1") == "an address of attempt 0");
  CHECK(rdzv.status(r.run_id).runs.at(0).master_port == second.master_port);
}

TEST_CASE("a duplicate node rank over the wire is an error naming both hosts", "[server][rendezvous]") {
  testing::TestDaemon daemon;
  proto::JoinRequest r;
  r.run_id = "dup";
  r.min_nodes = r.max_nodes = 2;
  r.requested_rank = 0;
  r.host = "alpha";
  daemon.rendezvous().join(r);
  r.host = "beta";
  CHECK_THROWS_WITH(daemon.rendezvous().join(r), Catch::Contains("alpha") && Catch::Contains("beta"));
}

TEST_CASE("flag --allow rejects other peers with a readable answer", "[server][allow]") {
  auto options = testing::TestDaemon::default_options();
  options.allow = {"10.0.0.0/8"};
  testing::TestDaemon daemon(options);
  proto::RendezvousClient client(daemon.client());  // validate + ping still answered
  CHECK_THROWS_WITH(client.hello(), Catch::Contains("not allowed"));
}

TEST_CASE("hello identifies the daemon", "[server]") {
  testing::TestDaemon daemon;
  const auto hello = daemon.rendezvous().hello();
  CHECK(hello.server == proto::kServerName);
  CHECK(hello.unix_time_ms > 0);
  CHECK_THAT(hello.peer, Catch::StartsWith("127.0.0.1:"));
}

namespace {
// A daemon on "::" (dual-stack), or nullptr when this host has no IPv6 loopback to test it with (a skip
// outside CI; under CI=true the test case fails here).
std::unique_ptr<testing::TestDaemon> dual_stack_daemon(std::vector<std::string> allow = {}) {
  auto options = testing::TestDaemon::default_options();
  options.host = "::";
  options.allow = std::move(allow);
  try {
    auto daemon = std::make_unique<testing::TestDaemon>(options);
    proto::ConnectOptions o;
    o.connect_timeout = 2s;
    o.retry_refused = false;
    proto::StoreClient::connect(Endpoint{"::1", daemon->endpoint().port}, o);
    return daemon;
  } catch (const Error& e) {
    MESHRUN_REPORT_SKIP("no IPv6 loopback here (" << e.what() << ")");
    return nullptr;
  }
}

proto::StoreClient client_at(const std::string& host, uint16_t port) {
  proto::ConnectOptions o;
  o.connect_timeout = 5s;
  o.retry_refused = false;
  return proto::StoreClient::connect(Endpoint{host, port}, o);
}
}  // namespace

TEST_CASE("a daemon on :: serves IPv6 and IPv4 clients, its runs' store ports too", "[server][ipv6]") {
  const auto daemon = dual_stack_daemon();
  if (!daemon) return;
  const uint16_t port = daemon->endpoint().port;
  proto::RendezvousClient v6(client_at("::1", port));
  CHECK_THAT(v6.hello().peer, Catch::StartsWith("[::1]:"));  // the peer as an endpoint: brackets and port
  proto::RendezvousClient v4(client_at("127.0.0.1", port));  // dual-stack: an IPv4 client is served too
  CHECK_THAT(v4.hello().peer, Catch::StartsWith("127.0.0.1:"));

  proto::JoinRequest r;
  r.run_id = "v6";
  r.host = "alpha";
  r.addr = "::1";
  r.pid = ::getpid();
  const auto node = v6.join(r);
  proto::AwaitReply reply;
  for (int i = 0; i < 10 && reply.status != proto::AwaitStatus::kAssigned; ++i) reply = v6.await(r.run_id, node, 2s);
  REQUIRE(reply.status == proto::AwaitStatus::kAssigned);
  // MASTER_ADDR for the workers: the bare address the agent reached the daemon at (PyTorch wants no brackets).
  CHECK(reply.assignment.master_addr == "::1");
  const auto store_port = static_cast<uint16_t>(reply.assignment.master_port);
  auto over_v6 = client_at("::1", store_port);
  over_v6.set("/worker/k", "v");
  CHECK(client_at("127.0.0.1", store_port).get("/worker/k") == "v");
}

TEST_CASE("flag --allow takes IPv6 rules, and IPv4 rules still match the IPv4 clients of a dual-stack daemon",
          "[server][allow][ipv6]") {
  {
    const auto daemon = dual_stack_daemon({"::1/128"});
    if (!daemon) return;
    const uint16_t port = daemon->endpoint().port;
    CHECK_THAT(proto::RendezvousClient(client_at("::1", port)).hello().peer, Catch::StartsWith("[::1]:"));
    CHECK_THROWS_WITH(proto::RendezvousClient(client_at("127.0.0.1", port)).hello(), Catch::Contains("not allowed"));
  }
  {
    const auto daemon = dual_stack_daemon({"127.0.0.0/8"});  // the IPv4 client arrives as ::ffff:127.0.0.1
    if (!daemon) return;
    const uint16_t port = daemon->endpoint().port;
    CHECK_THAT(proto::RendezvousClient(client_at("127.0.0.1", port)).hello().peer, Catch::StartsWith("127.0.0.1:"));
    CHECK_THROWS_WITH(proto::RendezvousClient(client_at("::1", port)).hello(), Catch::Contains("not allowed"));
  }
}

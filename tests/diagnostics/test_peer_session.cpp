// run_peer_session against an in-process daemon on 127.0.0.1, one thread per instance: every pair
// measured and the keys cleaned up, a peer that never comes (named, bounded wait), a peer whose
// published address refuses connections (reported as such), a session that is already full.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "diagnostics/peers/peer_checks.hpp"
#include "diagnostics/peers/peer_session.hpp"
#include "support/daemon.hpp"

using namespace meshrun;
using namespace meshrun::diagnostics;
using namespace std::chrono_literals;

namespace {

PeerSessionOptions small_session(const std::string& name, int peers) {
  PeerSessionOptions o;
  o.session = name;
  o.peers = peers;
  o.join_timeout = 20s;
  o.partner_timeout = 5s;
  o.op_timeout = 5s;
  o.bytes = 4 << 20;
  o.max_transfer = 1s;
  o.pings = 10;
  return o;
}

// Runs `count` instances at once and returns their outcomes, #0 first.
std::vector<PeerSessionOutcome> run_instances(const Endpoint& endpoint, const PeerSessionOptions& options, int count) {
  std::vector<std::future<PeerSessionOutcome>> futures;
  for (int i = 0; i < count; ++i) {
    futures.push_back(std::async(std::launch::async, [&] { return run_peer_session(endpoint, options); }));
  }
  std::vector<PeerSessionOutcome> outcomes;
  for (auto& f : futures) outcomes.push_back(f.get());
  std::sort(outcomes.begin(), outcomes.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return outcomes;
}

// A port on 127.0.0.1 where nothing listens (bound once, then closed).
uint16_t closed_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("three instances measure all three pairs and #0 sees them all", "[peers][session]") {
  testing::TestDaemon daemon;
  const auto outcomes = run_instances(daemon.endpoint(), small_session("all3", 3), 3);
  REQUIRE(outcomes.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(outcomes[static_cast<size_t>(i)].index == i);
    CHECK(outcomes[static_cast<size_t>(i)].nodes.size() == 3);
    CHECK(outcomes[static_cast<size_t>(i)].missing.empty());
    CHECK(outcomes[static_cast<size_t>(i)].rounds == 3);
  }
  const auto& first = outcomes[0];
  CHECK(first.complete_view);
  REQUIRE(first.pairs.size() == 3);
  for (const auto& p : first.pairs) {
    INFO("pair " << p.a << "-" << p.b << ": " << p.error);
    CHECK(p.ok);
    CHECK(p.a_to_b_gbps > 0);
    CHECK(p.b_to_a_gbps > 0);
    CHECK(p.a_to_b_bytes > 0);
    CHECK(p.rtt_avg_us > 0);
  }
  CHECK_FALSE(outcomes[1].complete_view);
  CHECK(outcomes[1].pairs.size() == 2);
  const auto checks = judge_peer_session(first, small_session("all3", 3));
  CHECK(checks[0].status == CheckStatus::kPass);
  CHECK(checks[1].status == CheckStatus::kPass);
  // #0 deleted the session's keys once everyone was done.
  CHECK(daemon.client().num_keys() == 0);
}

TEST_CASE("a peer that never starts is named after a bounded wait", "[peers][session]") {
  testing::TestDaemon daemon;
  auto options = small_session("missing", 3);
  options.join_timeout = 1s;
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = run_instances(daemon.endpoint(), options, 2);
  CHECK(std::chrono::steady_clock::now() - start < 15s);  // a safety net, not a timing assertion
  const auto& first = outcomes[0];
  CHECK(first.missing == std::vector<int>{2});
  CHECK(first.nodes.size() == 2);
  REQUIRE(first.pairs.size() == 1);
  CHECK(first.pairs[0].ok);
  const auto checks = judge_peer_session(first, options);
  CHECK(checks[0].status == CheckStatus::kFail);
  CHECK(checks[0].detail.find("#2 never joined") != std::string::npos);
  CHECK(checks[1].status == CheckStatus::kPass);
}

TEST_CASE("a peer address that refuses connections is reported as refused", "[peers][session]") {
  testing::TestDaemon daemon;
  auto options = small_session("refused", 2);
  options.partner_timeout = 1s;
  // #0 is real; this test plays #1, which publishes an address nobody listens on and then goes silent.
  auto fut = std::async(std::launch::async, [&] { return run_peer_session(daemon.endpoint(), options); });
  auto store = daemon.client();
  const std::string prefix = peer_session_prefix("refused");
  store.wait({prefix + "node/0"}, 10s);
  CHECK(store.add(prefix + "joined", 1) == 2);
  store.set(prefix + "node/1",
            nlohmann::json{{"host", "ghost"}, {"addr", "127.0.0.1:" + std::to_string(closed_port())}}.dump());
  const auto outcome = fut.get();
  REQUIRE(outcome.pairs.size() == 1);
  CHECK_FALSE(outcome.pairs[0].ok);
  INFO(outcome.pairs[0].error);
  CHECK(outcome.pairs[0].error.find("[refused]") == 0);
  CHECK(outcome.pairs[0].error.find("#1 ghost") != std::string::npos);
  REQUIRE(outcome.lost.size() == 1);
  CHECK(outcome.lost[0].find("#1 ghost did not finish round 0") == 0);
  REQUIRE(outcome.unreported.size() == 1);
  CHECK(outcome.unreported[0] == "#1 ghost");
  CHECK(judge_peer_session(outcome, options)[1].status == CheckStatus::kFail);
}

TEST_CASE("an instance beyond --peers is refused with the reason", "[peers][session]") {
  testing::TestDaemon daemon;
  auto store = daemon.client();
  store.add(peer_session_prefix("full") + "joined", 2);
  try {
    run_peer_session(daemon.endpoint(), small_session("full", 2));
    FAIL("a third instance of a 2-peer session was let in");
  } catch (const RemoteError& e) {
    CHECK(std::string(e.what()).find("already has 2 instance(s)") != std::string::npos);
  }
}

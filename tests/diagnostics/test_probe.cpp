// probe_endpoint against real peers on loopback: each failure class is produced for real and must be
// named correctly.
#include <catch2/catch.hpp>

#include "diagnostics/ping/probe.hpp"
#include "support/daemon.hpp"
#include "tests/diagnostics/fake_peer.hpp"

using namespace meshrun;
using namespace meshrun::diagnostics;

namespace {

// A port on 127.0.0.1 with nothing listening: bind (no listen) holds it so no one else takes it.
class ClosedPort {
 public:
  ClosedPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  uint16_t port() const { return port_; }

 private:
  UniqueFd fd_;
  uint16_t port_ = 0;
};

const auto kTimeout = std::chrono::seconds(2);

}  // namespace

TEST_CASE("a live meshrun daemon is recognized, with its version and how it sees us", "[probe]") {
  testing::TestDaemon daemon;
  const auto r = probe_endpoint(daemon.endpoint(), kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kMeshrun);
  CHECK(answered(r.outcome));
  REQUIRE(r.hello);
  CHECK(r.hello->server == "meshrun-rendezvous");
  CHECK(r.hello->peer.rfind("127.0.0.1:", 0) == 0);
  CHECK(r.connect_s >= 0);
  CHECK(r.rtt_s >= 0);
  CHECK(r.hint.empty());
}

TEST_CASE("nothing listening is named 'refused'", "[probe]") {
  ClosedPort closed;
  const auto r = probe_endpoint({"127.0.0.1", closed.port()}, kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kRefused);
  CHECK(std::string(outcome_name(r.outcome)) == "refused");
  CHECK(r.detail.find("nothing is listening") != std::string::npos);
  CHECK_FALSE(r.hint.empty());
}

TEST_CASE("a name under .invalid is named 'resolve'", "[probe]") {
  const auto r = probe_endpoint({"meshrun-no-such-host.invalid", 29400}, kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kResolve);
  CHECK(r.detail.find("meshrun-no-such-host.invalid") != std::string::npos);
  CHECK(r.connect_s < 0);
}

TEST_CASE("a daemon that rejects us by --allow is named 'rejected'", "[probe]") {
  auto options = testing::TestDaemon::default_options();
  options.allow = {"10.0.0.0/8"};  // we connect from 127.0.0.1
  testing::TestDaemon daemon(options);
  const auto r = probe_endpoint(daemon.endpoint(), kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kRejected);
  CHECK(r.detail.find("not allowed") != std::string::npos);
  CHECK(r.hint.find("--allow") != std::string::npos);
}

TEST_CASE("a TCP server that never answers is 'not-a-store', not a timeout", "[probe]") {
  testing::FakePeer peer(testing::PeerRole::kSilent);
  const auto r = probe_endpoint({"127.0.0.1", peer.port()}, std::chrono::milliseconds(500));
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kNotStore);
  CHECK(r.connect_s >= 0);  // the TCP handshake itself worked
  CHECK(r.detail.find("accepted the TCP connection") != std::string::npos);
}

TEST_CASE("an HTTP server is 'not-a-store' and its reply is shown", "[probe]") {
  testing::FakePeer peer(testing::PeerRole::kHttp);
  const auto r = probe_endpoint({"127.0.0.1", peer.port()}, kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kNotStore);
  CHECK(r.detail.find("'HTTP'") != std::string::npos);
}

TEST_CASE("a TCPStore that is not meshrun answers the ping but is named 'tcpstore'", "[probe]") {
  testing::FakePeer peer(testing::PeerRole::kTcpStoreOnly);
  const auto r = probe_endpoint({"127.0.0.1", peer.port()}, kTimeout);
  INFO(r.detail);
  CHECK(r.outcome == ProbeOutcome::kTcpStore);
  CHECK(answered(r.outcome));
  CHECK(r.rtt_s >= 0);
  CHECK_FALSE(r.hello);
}

TEST_CASE("clock skew is measured from the hello", "[probe]") {
  testing::FakePeer peer(testing::PeerRole::kSkewedMeshrun, 5000);
  const auto r = probe_endpoint({"127.0.0.1", peer.port()}, kTimeout);
  INFO(r.detail);
  REQUIRE(r.outcome == ProbeOutcome::kMeshrun);
  CHECK(r.skew_s > 4.0);
  CHECK(r.skew_s < 6.0);
}

// The join token over the wire (proto/rendezvous/join_auth.hpp): a daemon that requires one refuses rendezvous ops
// from connections that did not prove it, accepts the right proof, refuses a wrong one, and proves itself.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "proto/rendezvous/join_auth.hpp"
#include "tests/support/daemon.hpp"

using namespace meshrun;

namespace {

testing::TestDaemon daemon_with_token(const std::string& token) {
  rendezvous::ServerOptions options = testing::TestDaemon::default_options();
  options.join_token = token;
  return testing::TestDaemon(options);
}

proto::JoinRequest one_node_join(const std::string& run) {
  proto::JoinRequest r;
  r.run_id = run;
  r.host = "host-a";
  r.addr = "127.0.0.1";
  r.pid = ::getpid();
  return r;
}

}  // namespace

TEST_CASE("a daemon with a join token refuses a join from a connection that did not prove it", "[server][token]") {
  auto daemon = daemon_with_token("s3cret");
  auto rdzv = daemon.rendezvous();
  CHECK_THROWS_WITH(rdzv.join(one_node_join("run-t")), Catch::Contains("requires a join token"));
  // hello and status stay open (ping, check and the status command need no token).
  CHECK(rdzv.hello().server == proto::kServerName);
  CHECK(rdzv.status().runs.empty());  // the refused node took nothing
  // Without a token of its own, the client says what to set.
  CHECK_THROWS_WITH(rdzv.authenticate(""), Catch::Contains(proto::kTokenEnv));
}

TEST_CASE("the right token's proof admits the connection and a wrong one does not", "[server][token]") {
  auto daemon = daemon_with_token("s3cret");
  auto wrong = daemon.rendezvous();
  CHECK_THROWS_WITH(wrong.authenticate("guess"), Catch::Contains("does not match"));
  CHECK_THROWS_WITH(wrong.join(one_node_join("run-t")), Catch::Contains("requires a join token"));
  auto right = daemon.rendezvous();
  right.authenticate("s3cret");
  const std::string node = right.join(one_node_join("run-t"));
  CHECK_FALSE(node.empty());
  const auto status = right.status("run-t");
  REQUIRE(status.runs.size() == 1);
  CHECK(status.runs[0].nodes.size() == 1);
  // The proof is per connection: another connection must prove it again.
  auto other = daemon.rendezvous();
  CHECK_THROWS_WITH(other.heartbeat("run-t", node), Catch::Contains("requires a join token"));
}

TEST_CASE("a proof is good for the challenge it answers only", "[server][token]") {
  auto daemon = daemon_with_token("s3cret");
  auto client = daemon.rendezvous();
  const auto challenge = client.store().meshrun({{"op", "challenge"}});
  const std::string nonce = challenge.at("nonce").get<std::string>();
  CHECK(challenge.at("required").get<bool>());
  const std::string proof = proto::client_proof("s3cret", nonce, "c1");
  CHECK(client.store().meshrun({{"op", "auth"}, {"client_nonce", "c1"}, {"proof", proof}}).contains("proof"));
  // Replayed on a new connection (whose challenge differs), the same proof is refused.
  auto replay = daemon.rendezvous();
  replay.store().meshrun({{"op", "challenge"}});
  CHECK_THROWS_WITH(replay.store().meshrun({{"op", "auth"}, {"client_nonce", "c1"}, {"proof", proof}}),
                    Catch::Contains("does not match"));
}

TEST_CASE("a node with a token refuses a daemon that requires none", "[server][token]") {
  testing::TestDaemon open;
  auto rdzv = open.rendezvous();
  CHECK_THROWS_WITH(rdzv.authenticate("s3cret"), Catch::Contains("requires none"));
  rdzv.authenticate("");  // no token on either side: nothing to prove
  CHECK_FALSE(rdzv.join(one_node_join("run-open")).empty());
}

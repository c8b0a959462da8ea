// run_checks against an in-process daemon with real joins (duplicate ranks, a missing node, the happy
// path), against fake peers (clock skew), and judge_run on crafted status replies (stale nodes).
#include <catch2/catch.hpp>

#include "diagnostics/check/check_suite.hpp"
#include "diagnostics/check/run_verdict.hpp"
#include "support/daemon.hpp"
#include "tests/diagnostics/fake_peer.hpp"

using namespace meshrun;
using namespace meshrun::diagnostics;

namespace {

proto::JoinRequest join_request(const std::string& run_id, const std::string& host, int rank, int nnodes) {
  proto::JoinRequest j;
  j.run_id = run_id;
  j.host = host;
  j.addr = host;
  j.min_nodes = nnodes;
  j.max_nodes = nnodes;
  j.requested_rank = rank;
  j.keep_alive_timeout_s = 600;  // these fake nodes never heartbeat; keep them "alive" for the test
  j.last_call_timeout_s = 600;
  j.pid = 4242;
  return j;
}

CheckOptions options_for(const Endpoint& endpoint, const std::string& run_id) {
  CheckOptions o;
  o.endpoint = endpoint;
  o.run_id = run_id;
  o.timeout = std::chrono::seconds(2);
  return o;
}

const CheckResult& must_find(const CheckReport& report, const std::string& name) {
  const CheckResult* r = report.find(name);
  INFO(report.to_text());
  REQUIRE(r != nullptr);
  return *r;
}

}  // namespace

TEST_CASE("two agents requesting the same node rank are named", "[check][rdzv]") {
  testing::TestDaemon daemon;
  auto a = daemon.rendezvous();
  auto b = daemon.rendezvous();
  a.join(join_request("dup", "host-a", 0, 2));
  CHECK_THROWS_AS(b.join(join_request("dup", "host-b", 0, 2)), RemoteError);

  const auto report = run_checks(options_for(daemon.endpoint(), "dup"));
  const auto& dup = must_find(report, "rdzv.duplicate_ranks");
  CHECK(dup.status == CheckStatus::kFail);
  CHECK(dup.detail.find("rank 0") != std::string::npos);
  CHECK(dup.detail.find("host-a") != std::string::npos);
  CHECK(dup.detail.find("host-b") != std::string::npos);
  CHECK(report.exit_code() == 1);
}

TEST_CASE("one node of two missing is named, with the missing rank", "[check][rdzv]") {
  testing::TestDaemon daemon;
  auto a = daemon.rendezvous();
  a.join(join_request("half", "host-a", 0, 2));

  const auto report = run_checks(options_for(daemon.endpoint(), "half"));
  const auto& nodes = must_find(report, "rdzv.nodes");
  CHECK(nodes.status == CheckStatus::kFail);
  CHECK(nodes.detail.find("1 of 2 node(s) joined") != std::string::npos);
  CHECK(nodes.detail.find("host-a") != std::string::npos);
  const auto& missing = must_find(report, "rdzv.missing_ranks");
  CHECK(missing.status == CheckStatus::kFail);
  CHECK(missing.data["missing_ranks"] == nlohmann::json::array({1}));
  CHECK(must_find(report, "rdzv.duplicate_ranks").status == CheckStatus::kPass);
}

TEST_CASE("a complete run on a live daemon passes, including MASTER_ADDR", "[check][rdzv]") {
  testing::TestDaemon daemon;
  auto a = daemon.rendezvous();
  auto b = daemon.rendezvous();
  a.join(join_request("ok", "host-a", 0, 2));
  b.join(join_request("ok", "host-b", 1, 2));

  auto options = options_for(daemon.endpoint(), "ok");
  options.bandwidth = true;
  options.bandwidth_options.bytes = 1 << 20;
  const auto report = run_checks(options);
  INFO(report.to_text());
  for (const char* name :
       {"endpoint.dns", "endpoint.tcp", "endpoint.daemon", "endpoint.clock_skew", "rdzv.run", "rdzv.nodes",
        "rdzv.missing_ranks", "rdzv.duplicate_ranks", "rdzv.heartbeats", "rdzv.master", "bandwidth.tcp"}) {
    INFO(name);
    CHECK(must_find(report, name).status == CheckStatus::kPass);
  }
  CHECK(must_find(report, "rdzv.master").data["master_port"].get<int>() > 0);
  CHECK(must_find(report, "bandwidth.tcp").data["upload_gbps"].get<double>() > 0);
  CHECK(report.exit_code() == 0);
}

TEST_CASE("an unknown run id fails and lists the runs the daemon has", "[check][rdzv]") {
  testing::TestDaemon daemon;
  auto a = daemon.rendezvous();
  a.join(join_request("real", "host-a", -1, 2));
  const auto report = run_checks(options_for(daemon.endpoint(), "typo"));
  const auto& run = must_find(report, "rdzv.run");
  CHECK(run.status == CheckStatus::kFail);
  CHECK(run.detail.find("real") != std::string::npos);
}

TEST_CASE("a refused endpoint fails endpoint.tcp and skips what depends on it", "[check]") {
  testing::TestDaemon daemon;
  const Endpoint endpoint = daemon.endpoint();
  daemon.stop();
  auto options = options_for(endpoint, "x");
  options.bandwidth = true;
  // Give the daemon's thread a moment to close the listener; a still-open one would pass instead.
  CheckReport report;
  for (int i = 0; i < 100; ++i) {
    report = run_checks(options);
    if (report.find("endpoint.daemon") == nullptr) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto& tcp = must_find(report, "endpoint.tcp");
  CHECK(tcp.status == CheckStatus::kFail);
  CHECK(tcp.data["outcome"] == "refused");
  CHECK(report.find("rdzv.run") == nullptr);
  CHECK(report.find("bandwidth.tcp") == nullptr);
}

TEST_CASE("a rejected peer is named in endpoint.daemon", "[check]") {
  auto daemon_options = testing::TestDaemon::default_options();
  daemon_options.allow = {"192.0.2.0/24"};
  testing::TestDaemon daemon(daemon_options);
  const auto report = run_checks(options_for(daemon.endpoint(), "x"));
  const auto& d = must_find(report, "endpoint.daemon");
  CHECK(d.status == CheckStatus::kFail);
  CHECK(d.data["outcome"] == "rejected");
}

TEST_CASE("clock skew over 1 s warns", "[check]") {
  testing::FakePeer peer(testing::PeerRole::kSkewedMeshrun, -3000);
  const auto report = run_checks(options_for({"127.0.0.1", peer.port()}, ""));
  const auto& skew = must_find(report, "endpoint.clock_skew");
  CHECK(skew.status == CheckStatus::kWarn);
  CHECK(skew.detail.find("behind") != std::string::npos);

  testing::FakePeer fine(testing::PeerRole::kSkewedMeshrun, 0);
  CHECK(must_find(run_checks(options_for({"127.0.0.1", fine.port()}, "")), "endpoint.clock_skew").status ==
        CheckStatus::kPass);
}

TEST_CASE("judge_run names stale nodes and failed runs", "[rdzv]") {
  proto::StatusReply status;
  proto::RunStatus run;
  run.run_id = "r";
  run.state = proto::RunState::kClosed;
  run.min_nodes = run.max_nodes = 2;
  proto::NodeInfo ok;
  ok.node_id = "r#1";
  ok.host = "good-host";
  ok.group_rank = 0;
  ok.alive = true;
  proto::NodeInfo stale = ok;
  stale.node_id = "r#2";
  stale.host = "frozen-host";
  stale.group_rank = 1;
  stale.alive = false;
  stale.since_heartbeat_s = 7.5;
  run.nodes = {ok, stale};
  status.runs = {run};

  const auto results = judge_run(status, {.run_id = "r", .min_nodes = 2, .max_nodes = 2, .nnodes_given = false});
  const auto it =
      std::find_if(results.begin(), results.end(), [](const auto& r) { return r.name == "rdzv.heartbeats"; });
  REQUIRE(it != results.end());
  CHECK(it->status == CheckStatus::kFail);
  CHECK(it->detail.find("frozen-host") != std::string::npos);
  CHECK(it->detail.find("good-host") == std::string::npos);

  status.runs[0].state = proto::RunState::kFailed;
  status.runs[0].last_event = "node 1 is dead";
  const auto failed = judge_run(status, {.run_id = "r", .min_nodes = 2, .max_nodes = 2, .nnodes_given = true});
  CHECK(failed[0].name == "rdzv.run");
  CHECK(failed[0].status == CheckStatus::kFail);
  CHECK(failed[0].detail.find("node 1 is dead") != std::string::npos);

  // A different --nnodes than the run's is a warning.
  status.runs[0].state = proto::RunState::kClosed;
  const auto mismatch = judge_run(status, {.run_id = "r", .min_nodes = 3, .max_nodes = 3, .nnodes_given = true});
  CHECK(mismatch[1].name == "rdzv.nodes");
  CHECK(mismatch[1].status == CheckStatus::kWarn);
}

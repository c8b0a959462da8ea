// The etcd backend's pure parts: the run record, when a round closes, who is lost, what a node is told.
#include <catch2/catch.hpp>

#include "proto/rendezvous/join_auth.hpp"

#include "common/error.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/etcd/etcd_client.hpp"
#include "launcher/etcd/run_record.hpp"
#include "launcher/etcd/slow_node_judge.hpp"

using meshrun::launcher::etcd::RoundPhase;
using meshrun::launcher::etcd::RunRecord;
using meshrun::proto::NodeInfo;
using meshrun::proto::RestartCause;
namespace etcd = meshrun::launcher::etcd;

namespace {

NodeInfo node(const std::string& id, const std::string& host, int64_t pid, int requested_rank = -1, int workers = 2) {
  NodeInfo n;
  n.node_id = id;
  n.host = host;
  n.addr = host;
  n.pid = pid;
  n.requested_rank = requested_rank;
  n.local_world_size = workers;
  return n;
}

RunRecord open_run(int min_nodes, int max_nodes) {
  RunRecord run;
  run.min_nodes = min_nodes;
  run.max_nodes = max_nodes;
  return run;
}

}  // namespace

TEST_CASE("etcd run record: JSON round trip, and an unknown phase is refused", "[etcd]") {
  RunRecord run = open_run(2, 3);
  run.round = 4;
  run.phase = RoundPhase::kClosed;
  run.cause = RestartCause::kHung;
  run.reason = "rank 3 hung";
  run.survivors = {"a/1", "b/2"};
  run.members = {node("x", "a", 1)};
  const RunRecord back = nlohmann::json(run).get<RunRecord>();
  CHECK(back.round == 4);
  CHECK(back.phase == RoundPhase::kClosed);
  CHECK(back.cause == RestartCause::kHung);
  CHECK(back.reason == "rank 3 hung");
  CHECK(back.survivors == run.survivors);
  REQUIRE(back.members.size() == 1);
  CHECK(back.members[0].host == "a");
  nlohmann::json bad = run;
  bad["phase"] = "sleeping";
  CHECK_THROWS_AS(bad.get<RunRecord>(), meshrun::ProtocolError);
}

TEST_CASE("etcd round closing: at max at once, at min only after the last call or when every survivor is back",
          "[etcd]") {
  const std::vector<NodeInfo> two{node("n1", "b", 1), node("n2", "a", 2)};
  RunRecord run = open_run(2, 3);
  CHECK_FALSE(etcd::close_now(run, {node("n1", "b", 1)}, true));  // below min, whatever the clock
  CHECK_FALSE(etcd::close_now(run, two, false));                  // min reached, last call still open
  const auto closed = etcd::close_now(run, two, true);
  REQUIRE(closed);
  // Without requested ranks: (host, pid) order.
  CHECK((*closed)[0].host == "a");
  CHECK((*closed)[0].group_rank == 0);
  CHECK((*closed)[1].host == "b");
  CHECK(etcd::close_now(run, {node("n1", "b", 1), node("n2", "a", 2), node("n3", "c", 3)}, false));
  // After a restart the round closes as soon as every survivor is back, without the last call.
  run.round = 1;
  run.survivors = {"a/2", "b/1"};
  CHECK(etcd::close_now(run, two, false));
  run.survivors = {"a/2", "b/1", "c/3"};
  CHECK_FALSE(etcd::close_now(run, two, false));
  // A fresh run that starts at a later round (a reused id) is no restart: the last call still runs.
  RunRecord reused = open_run(2, 3);
  reused.round = 5;
  CHECK_FALSE(etcd::close_now(reused, two, false));
  CHECK(etcd::close_now(reused, two, true));
  // More than max joined: the first max (join order) make the round, the rest wait.
  const auto capped = etcd::close_now(open_run(1, 1), two, false);
  REQUIRE(capped);
  REQUIRE(capped->size() == 1);
  CHECK(capped->front().node_id == "n1");
}

TEST_CASE("etcd round closing waits for a survivor that reported a failure even when spares fill the round", "[etcd]") {
  RunRecord run = open_run(1, 2);
  run.round = 1;
  run.survivors = {"a/1", "b/2"};  // b reported its workers' failure and is still stopping them
  const std::vector<std::string> reported{"b/2"};
  const NodeInfo spare = node("n3", "c", 3);
  CHECK(etcd::close_now(run, {spare, node("n1", "a", 1)}, false));  // nobody reported: b may be the lost node
  CHECK_FALSE(etcd::close_now(run, {spare, node("n1", "a", 1)}, false, reported));  // at max, but b is not back
  const auto closed = etcd::close_now(run, {spare, node("n1", "a", 1), node("n2", "b", 2)}, false, reported);
  REQUIRE(closed);
  REQUIRE(closed->size() == 2);  // the survivors, not the spare that joined first
  CHECK((*closed)[0].host != "c");
  CHECK((*closed)[1].host != "c");
  // Past the last call too, as the daemon does (proto/rules/round_policy.hpp): survivors first while b is alive.
  CHECK_FALSE(etcd::close_now(run, {spare, node("n1", "a", 1)}, true, reported));
  // b's lease expired (live_survivors drops it, and its report with it): the spare takes its place.
  run.survivors = {"a/1"};
  const auto late = etcd::close_now(run, {spare, node("n1", "a", 1)}, false, {});
  REQUIRE(late);
  CHECK(late->size() == 2);
}

TEST_CASE("etcd round closing honours requested node ranks", "[etcd]") {
  const auto closed =
      etcd::close_now(open_run(3, 3), {node("n1", "a", 1, 2), node("n2", "b", 2), node("n3", "c", 3, 0)}, false);
  REQUIRE(closed);
  CHECK((*closed)[0].node_id == "n3");
  CHECK((*closed)[1].node_id == "n2");
  CHECK((*closed)[2].node_id == "n1");
}

TEST_CASE("etcd next round: survivors carry over, a lost node does not, too few fail the run", "[etcd]") {
  RunRecord closed = open_run(2, 3);
  closed.round = 3;
  closed.phase = RoundPhase::kClosed;
  closed.members = {node("n1", "a", 1), node("n2", "b", 2), node("n3", "c", 3)};
  const RunRecord failed_worker = etcd::next_round(closed, RestartCause::kWorkerFailed, "rank 1 failed", "");
  CHECK(failed_worker.round == 4);
  CHECK(failed_worker.phase == RoundPhase::kOpen);
  CHECK(failed_worker.cause == RestartCause::kWorkerFailed);
  CHECK(failed_worker.survivors == std::vector<std::string>{"a/1", "b/2", "c/3"});
  CHECK(failed_worker.members.empty());
  const RunRecord lost = etcd::next_round(closed, RestartCause::kNodeLost, "c vanished", "n3");
  CHECK(lost.phase == RoundPhase::kOpen);
  CHECK(lost.survivors == std::vector<std::string>{"a/1", "b/2"});
  closed.members.pop_back();
  const RunRecord below = etcd::next_round(closed, RestartCause::kNodeLost, "b vanished", "n2");
  CHECK(below.phase == RoundPhase::kFailed);
  CHECK_THAT(below.reason, Catch::Contains("b vanished") && Catch::Contains("fewer than the minimum of 2"));
}

TEST_CASE("etcd lost members are those neither alive nor done", "[etcd]") {
  RunRecord run = open_run(1, 3);
  run.members = {node("n1", "a", 1), node("n2", "b", 2), node("n3", "c", 3)};
  const auto lost = etcd::lost_members(run, {"n1"}, {"n2"});
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].node_id == "n3");
  CHECK(etcd::lost_members(run, {"n1", "n3"}, {"n2"}).empty());
}

TEST_CASE("etcd assignment: ranks, offsets and the store of the round", "[etcd]") {
  RunRecord run = open_run(2, 2);
  run.round = 2;
  run.phase = RoundPhase::kClosed;
  run.members = {node("n1", "a", 1, -1, 4), node("n2", "b", 2, -1, 2)};
  run.members[0].group_rank = 0;
  run.members[1].group_rank = 1;
  const auto a = etcd::assignment_for(run, "n2", "10.0.0.1", 4242);
  CHECK(a.round == 2);
  CHECK(a.group_rank == 1);
  CHECK(a.group_world_size == 2);
  CHECK(a.world_size == 6);
  CHECK(a.rank_offset == 4);
  CHECK(a.master_addr == "10.0.0.1");
  CHECK(a.master_port == 4242);
  CHECK(a.nodes.size() == 2);
  CHECK_THROWS_AS(etcd::assignment_for(run, "n9", "x", 1), meshrun::Error);
}

TEST_CASE("etcd keeps the run's secret sealed with the join token, and opens it only with the same one", "[etcd]") {
  const std::string secret = meshrun::proto::make_run_secret();
  const std::string sealed = etcd::seal_secret(secret, "token-A", "job7");
  CHECK(sealed.rfind("sealed:", 0) == 0);
  CHECK(sealed.find(secret) == std::string::npos);
  CHECK(sealed.find(secret.substr(0, 8)) == std::string::npos);
  CHECK(etcd::seal_secret(secret, "token-A", "job8") != sealed);  // bound to the run id too
  CHECK(etcd::unseal_secret(sealed, "token-A", "job7") == secret);
  CHECK_THROWS_WITH(etcd::unseal_secret(sealed, "token-B", "job7"), Catch::Contains("another join token"));
  CHECK_THROWS_WITH(etcd::unseal_secret(sealed, "token-A", "job8"), Catch::Contains("another join token"));
  CHECK_THROWS_WITH(etcd::unseal_secret(sealed, "", "job7"),
                    Catch::Contains("started with a join token") && Catch::Contains("MESHRUN_RDZV_TOKEN"));
  // Without a token there is nothing to seal it with (anyone who can write the run's keys could join it).
  CHECK(etcd::seal_secret(secret, "", "job7") == secret);
  CHECK(etcd::unseal_secret(secret, "", "job7") == secret);
  CHECK_THROWS_WITH(etcd::unseal_secret(secret, "token-A", "job7"), Catch::Contains("started without a join token"));
  CHECK_THROWS_AS(etcd::unseal_secret("sealed:zz:00", "token-A", "job7"), meshrun::ProtocolError);
}

TEST_CASE("etcd join timeout names who joined and the missing node ranks", "[etcd]") {
  const RunRecord run = open_run(3, 3);
  const std::string text = etcd::join_timeout_message("job7", run, {node("n1", "a", 11, 0), node("n2", "b", 12)}, 60);
  CHECK_THAT(text, Catch::Contains("job7") && Catch::Contains("2/3") && Catch::Contains("a (pid 11)") &&
                       Catch::Contains("missing node rank(s): 2"));
}

TEST_CASE("etcd prefix_end is the first key after the prefix", "[etcd]") {
  CHECK(etcd::prefix_end("/a/") == "/a0");
  CHECK(etcd::prefix_end(std::string("a\xff", 2)) == "b");
  CHECK(etcd::prefix_end("") == std::string(1, '\0'));
}

TEST_CASE(
    "etcd-v3 backend: --rdzv-backend etcd-v3 takes the members from --rdzv-endpoint, and etcd and etcd-v2 are its "
    "spellings",
    "[etcd][options]") {
  using meshrun::launcher::parse_launch_options;
  using meshrun::launcher::RdzvBackend;
  const auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  const auto parsed = parse_launch_options(
      {"--nnodes", "2:3", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "http://e1:2379/, e2,[::1]:2380", "t.py"},
      no_env, {});
  CHECK(parsed.options.backend == RdzvBackend::kEtcd);
  REQUIRE(parsed.options.etcd_endpoints.size() == 3);
  CHECK(parsed.options.etcd_endpoints[0].to_string() == "e1:2379");
  CHECK(parsed.options.etcd_endpoints[1].to_string() == "e2:2379");
  CHECK(parsed.options.etcd_endpoints[2].to_string() == "[::1]:2380");
  CHECK(parsed.warnings.empty());
  const auto legacy = parse_launch_options({"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e1", "t.py"}, no_env, {});
  CHECK(legacy.options.backend == RdzvBackend::kEtcd);
  REQUIRE(legacy.warnings.size() == 1);
  CHECK_THAT(legacy.warnings[0], Catch::Contains("using etcd-v3"));
  CHECK_THROWS_WITH(parse_launch_options({"--rdzv-backend", "etcd", "t.py"}, no_env, {}),
                    Catch::Contains("needs --rdzv-endpoint with the etcd members"));
  CHECK_FALSE(parsed.options.rdzv_conf.etcd_https.value_or(true));
  // TLS: https:// members, or protocol=https; its files only with TLS, and readable.
  const auto etcd = [&](const std::string& endpoints, const std::string& conf) {
    std::vector<std::string> args{"--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints};
    if (!conf.empty()) args.insert(args.end(), {"--rdzv-conf", conf});
    args.emplace_back("t.py");
    return parse_launch_options(args, no_env, {}).options;
  };
  const auto secure = etcd("https://e1:2379,https://e2", "");
  CHECK(secure.rdzv_conf.etcd_https == true);
  CHECK(secure.etcd_endpoints[1].to_string() == "e2:2379");
  CHECK(etcd("e1:2379", "protocol=https,cacert=/dev/null").rdzv_conf.etcd_https == true);
  CHECK(etcd("e1:2379", "protocol=https,cacert=/dev/null").rdzv_conf.etcd_ca_file == "/dev/null");
  CHECK_THROWS_WITH(etcd("https://e1,http://e2", ""), Catch::Contains("write them all one way"));
  CHECK_THROWS_WITH(etcd("https://e1", "protocol=http"), Catch::Contains("drop one of the two"));
  CHECK_THROWS_WITH(etcd("e1", "ca_cert=/dev/null"), Catch::Contains("add protocol=https"));
  CHECK_THROWS_WITH(etcd("e1", "protocol=tls"), Catch::Contains("expected http or https"));
  CHECK_THROWS_WITH(etcd("https://e1", "ssl_cert=/nonexistent/client.crt"), Catch::Contains("cannot read it"));
}

TEST_CASE("etcd live survivors: a survivor whose last-round key is gone is not waited for", "[etcd]") {
  RunRecord run = open_run(2, 3);
  run.round = 2;
  run.survivors = {"a/1", "b/2", "c/3"};
  // a re-joined; b still holds its round-1 key (on its way back); c's lease expired.
  CHECK(etcd::live_survivors(run, {node("b1", "b", 2)}, {node("a2", "a", 1)}) ==
        std::vector<std::string>{"a/1", "b/2"});
  const auto judged = [&] {
    RunRecord r = run;
    r.survivors = etcd::live_survivors(run, {}, {node("a2", "a", 1), node("b2", "b", 2)});
    return r;
  }();
  CHECK(etcd::close_now(judged, {node("a2", "a", 1), node("b2", "b", 2)}, false));
}

TEST_CASE("etcd cool-downs: carried from round to round, kept in JSON, and a node cooling down is not seated",
          "[etcd][slow_node]") {
  RunRecord closed = open_run(2, 2);
  closed.round = 5;
  closed.phase = RoundPhase::kClosed;
  closed.members = {node("n1", "a", 1), node("n2", "b", 2)};
  closed.cooling = {{"c/3", 10'000}, {"d/4", 3'000}};
  const RunRecord next = etcd::evicted_round(closed, "node 1 (b) evicted", "n2", "b/2", 20'000, 4'000);
  CHECK(next.phase == RoundPhase::kOpen);  // one survivor of min 2: the spare takes the seat
  CHECK(next.cause == RestartCause::kSlowNode);
  CHECK(next.survivors == std::vector<std::string>{"a/1"});
  CHECK(next.cooling == std::map<std::string, int64_t>{{"b/2", 20'000}, {"c/3", 10'000}});  // d/4's is over
  CHECK(nlohmann::json(next).get<RunRecord>().cooling == next.cooling);
  CHECK(etcd::next_round(next, RestartCause::kHung, "hung", "").cooling == next.cooling);
  CHECK(etcd::cooldown_left_s(next, "c/3", 4'000) == Approx(6));
  CHECK(etcd::cooldown_left_s(next, "c/3", 12'000) == 0);
  CHECK(etcd::cooldown_left_s(next, "a/1", 4'000) == 0);
  // The evicted node "c/3" joined anyway: with the survivor and a spare the round closes without it.
  const std::vector<NodeInfo> joined{node("n4", "a", 1), node("n5", "c", 3), node("n6", "s", 9)};
  const auto seated = etcd::close_now(next, joined, true, {}, 4'000);
  REQUIRE(seated);
  REQUIRE(seated->size() == 2);
  CHECK(((*seated)[0].host == "a" && (*seated)[1].host == "s"));
  // With --slow-node-cooldown 0 it is still not seated in the round its eviction opened.
  const RunRecord no_cooldown = etcd::evicted_round(closed, "node 1 (b) evicted", "n2", "b/2", 4'000, 4'000);
  CHECK(nlohmann::json(no_cooldown).get<RunRecord>().evicted == "b/2");
  const auto spare_seated = etcd::close_now(no_cooldown, {node("n4", "a", 1), node("n5", "b", 2)}, true, {}, 4'000);
  CHECK_FALSE(spare_seated);  // b alone with a: not seated, so the round waits for the spare
  // Once its cool-down is over it may take a seat again.
  const auto later = etcd::close_now(next, {node("n4", "a", 1), node("n5", "c", 3)}, true, {}, 12'000);
  REQUIRE(later);
  CHECK(later->size() == 2);
}

namespace {

// Three members of one rank each; the run's node rank 1 ("b") computes twice as long per step.
struct JudgedRun {
  meshrun::TimePoint now{std::chrono::hours(1)};
  RunRecord run = open_run(3, 3);
  std::map<std::string, etcd::NodeProgress> keys;
  int64_t step = 0;
  int64_t revision = 0;

  JudgedRun() {
    run.phase = RoundPhase::kClosed;
    run.members = {node("n1", "a", 1, -1, 1), node("n2", "b", 2, -1, 1), node("n3", "c", 3, -1, 1)};
    for (int i = 0; i < 3; ++i) run.members[static_cast<size_t>(i)].group_rank = i;
  }
  /// One second: every node puts ten more steps (its key's revision moves).
  void second() {
    now += std::chrono::seconds(1);
    step += 10;
    for (int i = 0; i < 3; ++i) {
      meshrun::proto::RankProgress p;
      p.rank = i;
      p.step = step;
      p.phase = "train";
      p.compute_s = i == 1 ? 0.2 : 0.1;
      p.step_time_s = 0.25;
      keys[run.members[static_cast<size_t>(i)].node_id] = etcd::NodeProgress{{p}, ++revision};
    }
  }
};

}  // namespace

TEST_CASE("etcd slow-node judge: names the straggler from the progress keys, and evicts it only with a spare",
          "[etcd][slow_node]") {
  meshrun::proto::SlowNodePolicy policy;
  policy.replace = true;
  policy.after_s = 20;
  SECTION("a spare: evicted once slow for the sustained time, with the rule's figures") {
    JudgedRun r;
    etcd::SlowNodeJudge judge(r.run, 1.3, policy, r.now);
    int seconds_run = 0;
    etcd::SlowNodeJudgement last;
    while (!judge.eviction() && seconds_run < 60) {
      r.second();
      last = judge.judge(r.keys, 1, r.now);
      ++seconds_run;
    }
    REQUIRE(judge.eviction());
    CHECK(judge.eviction()->node_id == "n2");
    CHECK(judge.eviction()->identity == "b/2");
    CHECK(seconds_run >= 20);
    CHECK(seconds_run < 30);
    REQUIRE(last.stragglers.size() == 1);
    CHECK(last.stragglers[0].rank == 1);
    CHECK(last.stragglers[0].host == "b");
    CHECK_THAT(judge.eviction()->decision.line(),
               Catch::StartsWith("node 1 (b, pid 2) evicted for a spare: its ranks ran 2.0x slower"));
    // What the other agents read back from r/<round>/judged.
    const auto back = nlohmann::json(last).get<etcd::SlowNodeJudgement>();
    REQUIRE(back.stragglers.size() == 1);
    CHECK(back.stragglers[0].rank == 1);
  }
  SECTION("no spare: named, kept, and the note says why") {
    JudgedRun r;
    etcd::SlowNodeJudge judge(r.run, 1.3, policy, r.now);
    etcd::SlowNodeJudgement last;
    for (int i = 0; i < 60; ++i) {
      r.second();
      last = judge.judge(r.keys, 0, r.now);
      CHECK_FALSE(judge.eviction());
    }
    REQUIRE(last.stragglers.size() == 1);
    CHECK_THAT(last.note, Catch::Contains("no spare waits"));
  }
  SECTION("without --replace-slow-nodes: named, never evicted") {
    JudgedRun r;
    etcd::SlowNodeJudge judge(r.run, 1.3, meshrun::proto::SlowNodePolicy{}, r.now);
    etcd::SlowNodeJudgement last;
    for (int i = 0; i < 90; ++i) {
      r.second();
      last = judge.judge(r.keys, 1, r.now);
      CHECK_FALSE(judge.eviction());
    }
    REQUIRE(last.stragglers.size() == 1);
    CHECK(last.note.empty());
  }
}

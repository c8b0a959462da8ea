// The pure parts of `meshrun check --bandwidth --peers`: the round-robin schedule, merging the two
// ends' reports, the matrix tables and JSON, and the bandwidth.peers / bandwidth.pairs verdicts.
#include <catch2/catch.hpp>

#include <set>

#include "common/error.hpp"
#include "diagnostics/peers/peer_checks.hpp"
#include "diagnostics/peers/peer_matrix.hpp"
#include "diagnostics/peers/peer_schedule.hpp"

using namespace meshrun;
using namespace meshrun::diagnostics;

namespace {

std::vector<PeerNode> three_nodes() {
  return {{0, "node0", "10.0.0.1:4000"}, {1, "node1", "10.0.0.2:4001"}, {2, "node2", "10.0.0.3:4002"}};
}

PairResult ok_pair(int a, int b, double ab, double ba, double rtt) {
  PairResult p;
  p.a = a;
  p.b = b;
  p.ok = true;
  p.a_to_b_gbps = ab;
  p.b_to_a_gbps = ba;
  p.a_to_b_bytes = 1000;
  p.b_to_a_bytes = 2000;
  p.rtt_min_us = rtt - 1;
  p.rtt_avg_us = rtt;
  p.rtt_max_us = rtt + 1;
  return p;
}

PairResult bad_pair(int a, int b, const std::string& error) {
  PairResult p;
  p.a = a;
  p.b = b;
  p.error = error;
  return p;
}

}  // namespace

TEST_CASE("round robin: every pair once, nobody twice in a round", "[peers][schedule]") {
  CHECK(round_robin_rounds(0).empty());
  CHECK(round_robin_rounds(1).empty());
  for (int n = 2; n <= 17; ++n) {
    INFO("n = " << n);
    const auto rounds = round_robin_rounds(n);
    CHECK(static_cast<int>(rounds.size()) == (n % 2 == 0 ? n - 1 : n));
    std::set<std::pair<int, int>> seen;
    for (const auto& round : rounds) {
      std::set<int> busy;
      CHECK(static_cast<int>(round.size()) == n / 2);
      for (const auto& p : round) {
        CHECK(p.first < p.second);
        CHECK(p.first >= 0);
        CHECK(p.second < n);
        CHECK(busy.insert(p.first).second);
        CHECK(busy.insert(p.second).second);
        CHECK(seen.insert({p.first, p.second}).second);
      }
    }
    CHECK(static_cast<int>(seen.size()) == n * (n - 1) / 2);
  }
}

TEST_CASE("pair reports round-trip through JSON and reject malformed ones", "[peers][matrix]") {
  auto p = ok_pair(1, 2, 1.5, 2.5, 40);
  p.round = 3;
  const auto back = pair_from_json(pair_to_json(p));
  CHECK(back.a == 1);
  CHECK(back.b == 2);
  CHECK(back.round == 3);
  CHECK(back.ok);
  CHECK(back.a_to_b_gbps == 1.5);
  CHECK(back.b_to_a_bytes == 2000);
  CHECK(back.rtt_max_us == 41);
  auto broken = pair_to_json(p);
  broken.erase("rtt_avg_us");
  CHECK_THROWS_AS(pair_from_json(broken), ProtocolError);
  broken = pair_to_json(p);
  broken["a"] = "one";
  CHECK_THROWS_AS(pair_from_json(broken), ProtocolError);
}

TEST_CASE("merge prefers a success from either end and names pairs nobody reported", "[peers][matrix]") {
  const auto nodes = three_nodes();
  // #0 saw its pair with #1 fail; #1 measured it. Nobody reported 1-2.
  const std::vector<std::vector<PairResult>> reports = {
      {bad_pair(0, 1, "[timeout] late"), ok_pair(0, 2, 3, 4, 10)},
      {ok_pair(0, 1, 1, 2, 20)},
  };
  const auto merged = merge_pairs(nodes, reports);
  REQUIRE(merged.size() == 3);
  CHECK(merged[0].a == 0);
  CHECK(merged[0].b == 1);
  CHECK(merged[0].ok);
  CHECK(merged[1].ok);
  CHECK_FALSE(merged[2].ok);
  CHECK(merged[2].error == "neither #1 node1 nor #2 node2 reported this pair");
}

TEST_CASE("matrices are row -> column for throughput and symmetric for latency", "[peers][matrix]") {
  const auto nodes = three_nodes();
  const std::vector<PairResult> pairs = {ok_pair(0, 1, 1.25, 2.5, 30), ok_pair(0, 2, 3, 4, 50),
                                         bad_pair(1, 2, "[refused] nothing listening")};
  const auto gbps = throughput_matrix(nodes, pairs);
  CHECK_FALSE(gbps[0][0].has_value());
  CHECK(*gbps[0][1] == 1.25);
  CHECK(*gbps[1][0] == 2.5);
  CHECK(*gbps[2][0] == 4);
  CHECK_FALSE(gbps[1][2].has_value());
  const auto rtt = latency_matrix(nodes, pairs);
  CHECK(*rtt[0][2] == 50);
  CHECK(*rtt[2][0] == 50);

  const std::string text = format_matrix(nodes, pairs, 2);
  INFO(text);
  CHECK(text.find("  GB/s row->col") == 0);
  CHECK(text.find("1.250") != std::string::npos);
  CHECK(text.find("rtt us") != std::string::npos);
  CHECK(text.find("x #1 node1 <-> #2 node2: [refused] nothing listening") != std::string::npos);

  const auto j = matrix_json(nodes, pairs);
  CHECK(j.at("nodes").size() == 3);
  CHECK(j.at("nodes")[2].at("addr") == "10.0.0.3:4002");
  CHECK(j.at("pairs").size() == 3);
  CHECK(j.at("gbps")[1][0] == 2.5);
  CHECK(j.at("gbps")[1][2].is_null());
  CHECK(j.at("rtt_us")[0][0].is_null());
}

TEST_CASE("bandwidth.peers names the instances that never came", "[peers][check]") {
  PeerSessionOptions options;
  options.session = "bw";
  PeerSessionOutcome o;
  o.index = 0;
  o.peers = 4;
  o.joined = 3;  // #2 joined after the start, #3 never did
  o.nodes = {{0, "node0", "10.0.0.1:1"}, {1, "node1", "10.0.0.2:1"}};
  o.missing = {2, 3};
  o.rounds = 1;
  o.complete_view = true;
  o.pairs = {ok_pair(0, 1, 1, 1, 10)};
  const auto results = judge_peer_session(o, options);
  REQUIRE(results.size() == 2);
  CHECK(results[0].name == "bandwidth.peers");
  CHECK(results[0].status == CheckStatus::kFail);
  CHECK(results[0].detail.find("only 2 of 4 instances") != std::string::npos);
  CHECK(results[0].detail.find("#3 never joined") != std::string::npos);
  CHECK(results[0].detail.find("#2 joined after the start") != std::string::npos);
  CHECK(results[0].detail.find("#1 node1 10.0.0.2:1") != std::string::npos);
  CHECK(results[0].data.at("missing") == nlohmann::json({2, 3}));
  CHECK(results[1].name == "bandwidth.pairs");
  CHECK(results[1].status == CheckStatus::kPass);
  CHECK_FALSE(results[1].table.empty());
}

TEST_CASE("bandwidth.pairs fails naming each failed pair and each silent node", "[peers][check]") {
  PeerSessionOptions options;
  options.session = "bw";
  PeerSessionOutcome o;
  o.index = 0;
  o.peers = 3;
  o.joined = 3;
  o.nodes = {{0, "node0", "a"}, {1, "node1", "b"}, {2, "node2", "c"}};
  o.rounds = 3;
  o.complete_view = true;
  o.pairs = {ok_pair(0, 1, 1, 2, 10), ok_pair(0, 2, 3, 4, 10), bad_pair(1, 2, "[timeout] no answer")};
  o.unreported = {"#2 node2"};
  const auto results = judge_peer_session(o, options);
  CHECK(results[0].status == CheckStatus::kPass);
  const auto& pairs = results[1];
  CHECK(pairs.status == CheckStatus::kFail);
  CHECK(pairs.detail.find("2 of 3 pair(s) measured in 3 round(s)") != std::string::npos);
  CHECK(pairs.detail.find("slowest 1.000 GB/s (#0 node0 -> #1 node1)") != std::string::npos);
  CHECK(pairs.detail.find("fastest 4.000 GB/s (#2 node2 -> #0 node0)") != std::string::npos);
  CHECK(pairs.detail.find("FAILED #1 node1 <-> #2 node2: [timeout] no answer") != std::string::npos);
  CHECK(pairs.detail.find("#2 node2 never reported its results") != std::string::npos);
  CHECK(pairs.data.at("complete") == true);

  // Not #0: only its own pairs, no table.
  o.index = 1;
  o.complete_view = false;
  o.unreported.clear();
  o.pairs = {ok_pair(0, 1, 1, 2, 10)};
  const auto mine = judge_peer_session(o, options);
  CHECK(mine[1].status == CheckStatus::kPass);
  CHECK(mine[1].detail.find("this node's pairs: 1 of 1") == 0);
  CHECK(mine[1].table.empty());
}

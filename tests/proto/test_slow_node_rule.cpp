// The slow-node rule (proto/rules/slow_node_rule.hpp): when a slow node makes way for a spare, with its figures.
#include <catch2/catch.hpp>

#include "proto/rules/slow_node_rule.hpp"

using namespace meshrun::proto;

namespace {
SlowNode slow(int rank, double slowdown, double for_s) {
  return SlowNode{
      .node_rank = rank, .host = "host-" + std::to_string(rank), .pid = 7, .slowdown = slowdown, .slow_for_s = for_s};
}
SlowNodeFacts facts(std::vector<SlowNode> nodes) {
  SlowNodeFacts f;
  f.slow = std::move(nodes);
  f.spares = 1;
  f.recovery_s = 20;
  f.redo_s = 30;
  f.after_s = 60;
  return f;
}
}  // namespace

TEST_CASE("a node slow long enough, with a spare, is evicted when staying loses more than twice the restart",
          "[slow_node]") {
  const auto d = judge_slow_nodes(facts({slow(1, 2.0, 64)}));
  REQUIRE(d.verdict == SlowNodeVerdict::kEvict);
  CHECK(d.loss_s == Approx(300));  // 600 s at half speed
  CHECK(d.cost_s == Approx(50));   // recovery 20 s + 30 s of work since the last checkpoint
  CHECK(d.line() ==
        "node 1 (host-1, pid 7) evicted for a spare: its ranks ran 2.0x slower than the job's median for 64 s; "
        "staying loses 5.0 min of the next 10 min, a restart costs about 0.8 min (recovery 20 s, 30 s of work since "
        "the last checkpoint)");
  const auto record = eviction_record(d);
  CHECK(record.node_rank == 1);
  CHECK(record.slowdown == 2.0);
  CHECK(record.cost_s == Approx(50));
  CHECK(record.line == d.line());
}

TEST_CASE("no eviction before the node was slow for long enough, with no spare, in a checkpoint, or with two slow",
          "[slow_node]") {
  CHECK(judge_slow_nodes(facts({})).verdict == SlowNodeVerdict::kNone);
  CHECK(judge_slow_nodes(facts({slow(1, 3.0, 59)})).verdict == SlowNodeVerdict::kTooSoon);
  CHECK(judge_slow_nodes(facts({slow(1, 3.0, 59)})).line().empty());

  auto no_spare = facts({slow(1, 3.0, 90)});
  no_spare.spares = 0;
  const auto d = judge_slow_nodes(no_spare);
  CHECK(d.verdict == SlowNodeVerdict::kNoSpare);
  CHECK_THAT(d.line(), Catch::Contains("no spare waits: it keeps its seat"));

  auto saving = facts({slow(1, 3.0, 90)});
  saving.checkpointing = true;
  CHECK(judge_slow_nodes(saving).verdict == SlowNodeVerdict::kCheckpoint);

  // Two nodes slow at once, even one slow long enough: the job or the network, never an eviction.
  const auto two = judge_slow_nodes(facts({slow(1, 2.0, 90), slow(2, 1.8, 10)}));
  CHECK(two.verdict == SlowNodeVerdict::kSeveral);
  CHECK(two.slow_nodes == 2);
  CHECK(two.node.node_rank == 1);  // the one slow longest is named
  CHECK_THAT(two.line(), Catch::StartsWith("2 nodes are named slow at once (node 1 (host-1, pid 7) the longest"));
}

TEST_CASE("only when it pays: a mild slowdown with much work since the last checkpoint keeps its seat", "[slow_node]") {
  auto mild = facts({slow(1, 1.3, 120)});
  mild.redo_s = 600;  // ten minutes since the last checkpoint
  const auto d = judge_slow_nodes(mild);
  CHECK(d.verdict == SlowNodeVerdict::kNotWorth);
  CHECK(d.loss_s == Approx(600 * (1 - 1 / 1.3)));
  CHECK(d.cost_s == Approx(620));
  CHECK_THAT(d.line(), Catch::EndsWith(": it keeps its seat"));
  // The same node just after a checkpoint: the restart costs its recovery alone, and staying loses more than twice.
  mild.redo_s = 0;
  CHECK(judge_slow_nodes(mild).verdict == SlowNodeVerdict::kEvict);
}

TEST_CASE("before the first restart the recovery is the rule's default, and without beats the work to redo is untold",
          "[slow_node]") {
  auto f = facts({slow(1, 2.0, 70)});
  f.recovery_s = -1;
  f.redo_s = -1;
  const auto d = judge_slow_nodes(f);
  CHECK(d.recovery_s == kDefaultRecoveryS);
  CHECK(d.cost_s == Approx(kDefaultRecoveryS));
  CHECK(d.verdict == SlowNodeVerdict::kEvict);
  CHECK_THAT(d.line(), Catch::Contains("the work since the last save not known: the script does not beat"));
}

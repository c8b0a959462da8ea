// Hangs without beats, the agent's side: the hook's messages, the collective watch and its budget, the
// verdict over recorded cases (lockstep data parallelism, a stopped rank on another node, mismatches,
// subgroups, ranks without a record), the records' JSON round trip and the grouped stacks.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "launcher/hang/hang_verdict.hpp"
#include "launcher/hang/stack_groups.hpp"
#include "launcher/progress/arrival_relay.hpp"
#include "launcher/progress/beat_socket.hpp"
#include "launcher/progress/collective_watch.hpp"
#include "launcher/progress/hang_policy.hpp"
#include "launcher/progress/progress_monitor.hpp"
#include "launcher/progress/rank_tracker.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"
#include "support/subprocess.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
using namespace meshrun::proto;
using Clock = std::chrono::steady_clock;

namespace {

// What a deadlocked rank waits on (late or hung: launcher/activity/wait_rule.hpp): every rank of these cases is
// stuck for good, so the verdicts name hangs, not late ranks.
RankWait deadlocked() {
  RankWait w;
  w.read = true;
  w.place = WaitPlace::kInside;
  w.phrase = "waits on a lock, an event or a queue that nothing else in its tree can release";
  return w;
}

// A rank of a 4-rank lockstep job (2 nodes of 2) that completed `completed` all_reduces of group 0 and
// entered `enqueued`.
RankRecord lockstep_rank(int rank, int64_t enqueued, int64_t completed, const std::string& op = "all_reduce",
                         const std::string& sizes = "[[1024]]") {
  RankRecord r;
  r.rank = rank;
  r.local_rank = rank % 2;
  r.node = rank / 2;
  r.host = "node" + std::to_string(rank / 2);
  r.pid = 1000 + rank;
  r.source = RecordSource::kRecorded;
  r.wait = deadlocked();
  r.groups["0"] = GroupProgress{{0, 1, 2, 3}, enqueued, completed};
  for (int64_t s = std::max<int64_t>(1, completed - 2); s <= enqueued; ++s) {
    CollectiveEntry e{.group = "0",
                      .seq = s,
                      .op = op,
                      .sizes = sizes,
                      .dtypes = "Float",
                      .created_unix_ms = 1'700'000'000'000 + s,
                      .retired = s <= completed,
                      .frames = {}};
    if (!e.retired) e.frames = {"/job/train.py:88 in step", "/job/train.py:120 in main"};
    r.entries.push_back(e);
  }
  return r;
}

}  // namespace

TEST_CASE("lockstep: the rank that never entered is named, not the ranks that wait in it", "[hang][verdict]") {
  // Every rank is at the same step; ranks 0-2 entered #1580 and wait; rank 3 never did.
  const std::vector<RankRecord> ranks = {lockstep_rank(0, 1580, 1579), lockstep_rank(1, 1580, 1579),
                                         lockstep_rank(2, 1580, 1579), lockstep_rank(3, 1579, 1579)};
  for (int order = 0; order < 2; ++order) {  // whichever node's records come first
    auto input = ranks;
    if (order == 1) std::reverse(input.begin(), input.end());
    const HangVerdict v = judge_hang(input, FallbackSuspect{0, "waits in collective #1580 of group 0"});
    CHECK(v.kind == HangKind::kNeverEntered);
    CHECK(v.culprits == std::vector<int>{3});
    CHECK(v.seq == 1580);
    CHECK(v.group == "0");
    CHECK(v.waiting == std::vector<int>{0, 1, 2});
    CHECK(v.suspect_node == 1);
    CHECK(v.suspect_host == "node1");
    CHECK_THAT(v.line, Catch::StartsWith("hang: rank 3 (node1, local rank 1, pid 1003) never entered all_reduce "
                                         "#1580 of group 0 (ranks 0-3); ranks 0-2 wait in it since "));
    CHECK_THAT(v.line, Catch::EndsWith(", called at /job/train.py:88 in step"));
  }
}

TEST_CASE("a stopped rank on another node wins over the ranks that wait for it", "[hang][verdict]") {
  // Node 0 suspected its own rank 0 (it only waits); rank 1 on node 1 is stopped (state T) mid-step.
  std::vector<RankRecord> ranks = {lockstep_rank(0, 51, 50), lockstep_rank(1, 50, 50)};
  ranks[1].state = ProcessState::kStopped;
  ranks[1].source = RecordSource::kNoAnswer;
  ranks[1].source_detail = "the worker is stopped";
  const HangVerdict v = judge_hang(ranks, FallbackSuspect{0, "no progress beat for 5.1 s"});
  CHECK(v.kind == HangKind::kStopped);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK(v.suspect_node == 0);  // lockstep_rank puts ranks 0 and 1 on node 0
  CHECK_THAT(v.line, Catch::StartsWith("hang: rank 1 (node0, local rank 1, pid 1001) is stopped by a signal "
                                       "(state T); rank 0 wait"));
  CHECK(v.notes == std::vector<std::string>{"no collective record from rank 1: the worker is stopped"});
}

TEST_CASE("without collective records, a stopped worker is still named (meshrun-trainer, beats only)",
          "[hang][verdict]") {
  RankRecord a, b;
  a.rank = 0, a.host = "node0", b.rank = 1, b.host = "node1", b.node = 1;
  b.state = ProcessState::kStopped;
  const HangVerdict v = judge_hang({a, b}, FallbackSuspect{0, "no progress beat for 5.1 s"});
  CHECK(v.kind == HangKind::kStopped);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK(v.suspect_node == 1);
}

TEST_CASE("a mismatch names the minority: another op, or another size", "[hang][verdict]") {
  std::vector<RankRecord> ranks = {lockstep_rank(0, 1580, 1579), lockstep_rank(1, 1580, 1579),
                                   lockstep_rank(2, 1580, 1579), lockstep_rank(3, 1580, 1579, "broadcast")};
  HangVerdict v = judge_hang(ranks, std::nullopt);
  CHECK(v.kind == HangKind::kMismatch);
  CHECK(v.culprits == std::vector<int>{3});
  CHECK_THAT(v.line, Catch::StartsWith("hang: ranks disagree at #1580 of group 0 (ranks 0-3): rank 3 called "
                                       "broadcast, ranks 0-2 all_reduce"));
  ranks[3] = lockstep_rank(3, 1580, 1579, "all_reduce", "[[3]]");
  v = judge_hang(ranks, std::nullopt);
  CHECK(v.kind == HangKind::kMismatch);
  CHECK(v.culprits == std::vector<int>{3});
  CHECK_THAT(v.line,
             Catch::Contains("rank 3 called all_reduce of [[3]] Float, ranks 0-2 all_reduce of [[1024]] Float"));
}

TEST_CASE("a subgroup hang is named in its group, also when the default group waits on it", "[hang][verdict]") {
  // Pair groups "1" = {0,1} and "2" = {2,3}; rank 3 never enters #7 of group 2; rank 2 waits there.
  auto pair_rank = [](int rank, int64_t enq, int64_t done, int64_t created_unix_ms = 1) {
    RankRecord r = lockstep_rank(rank, 0, 0);
    r.groups.clear();
    r.entries.clear();
    const std::string g = rank < 2 ? "1" : "2";
    r.groups[g] = GroupProgress{rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, enq, done};
    r.entries.push_back(CollectiveEntry{.group = g,
                                        .seq = enq,
                                        .op = "all_reduce",
                                        .sizes = "[[4]]",
                                        .dtypes = "Float",
                                        .created_unix_ms = created_unix_ms,
                                        .retired = enq <= done,
                                        .frames = {}});
    return r;
  };
  std::vector<RankRecord> idle_default = {pair_rank(0, 9, 9), pair_rank(1, 9, 9), pair_rank(2, 7, 6),
                                          pair_rank(3, 6, 6)};
  HangVerdict v = judge_hang(idle_default, std::nullopt);
  CHECK(v.kind == HangKind::kNeverEntered);
  CHECK(v.group == "2");
  CHECK(v.group_ranks == std::vector<int>{2, 3});
  CHECK(v.culprits == std::vector<int>{3});
  CHECK_THAT(v.line, Catch::Contains("never entered all_reduce #7 of group 2 (ranks 2,3); rank 2 waits in it"));

  // Ranks 0 and 1 then wait in the default group for ranks 2 and 3: rank 2 is a link (it waits in group 2),
  // rank 3 the culprit, and the group where it is waited for directly is named.
  auto with_default = idle_default;
  for (auto& r : with_default) r.groups["0"] = GroupProgress{{0, 1, 2, 3}, r.rank < 2 ? 5 : 4, 4};
  v = judge_hang(with_default, std::nullopt);
  CHECK(v.culprits == std::vector<int>{3});
  CHECK(v.group == "2");

  // Group 1 keeps training: its records caught rank 1 inside #256 before rank 0 entered it. That wait
  // began long after group 2's and is not the hang (seen in CI: the healthy pair was named).
  std::vector<RankRecord> live_pair = {pair_rank(0, 255, 255, 5000), pair_rank(1, 256, 255, 5000),
                                       pair_rank(2, 7, 6, 1000), pair_rank(3, 6, 6, 1000)};
  for (int order = 0; order < 2; ++order) {
    if (order == 1) std::reverse(live_pair.begin(), live_pair.end());
    v = judge_hang(live_pair, std::nullopt);
    CHECK(v.group == "2");
    CHECK(v.culprits == std::vector<int>{3});
  }
}

TEST_CASE("ranks without a record are named with the reason, and never hide a recorded culprit", "[hang][verdict]") {
  std::vector<RankRecord> ranks = {lockstep_rank(0, 12, 11), lockstep_rank(1, 12, 11), lockstep_rank(2, 12, 11),
                                   lockstep_rank(3, 12, 11)};
  ranks[3].source = RecordSource::kNoHook;
  ranks[3].source_detail = "python -I";
  ranks[3].groups.clear();
  ranks[3].entries.clear();
  HangVerdict v = judge_hang(ranks, std::nullopt);
  CHECK(v.kind == HangKind::kNoRecord);
  CHECK(v.culprits == std::vector<int>{3});
  CHECK(v.notes == std::vector<std::string>{
                       "rank 3 waits on a lock, an event or a queue that nothing else in its tree can release",
                       "no collective record from rank 3: python -I"});
  // Rank 2 never entered: it is the culprit even though rank 3 cannot tell.
  ranks[2] = lockstep_rank(2, 11, 11);
  v = judge_hang(ranks, std::nullopt);
  CHECK(v.kind == HangKind::kNeverEntered);
  CHECK(v.culprits == std::vector<int>{2});
}

TEST_CASE("every rank inside, the same op: a transport fault, nobody blamed, and with no collective the fallback",
          "[hang][verdict]") {
  std::vector<RankRecord> inside = {lockstep_rank(0, 3, 2), lockstep_rank(1, 3, 2)};
  for (auto& r : inside) r.groups["0"].ranks = {0, 1};
  HangVerdict v = judge_hang(inside, std::nullopt);
  CHECK(v.kind == HangKind::kAllInside);
  CHECK(v.culprits.empty());
  const std::vector<RankRecord> idle = {lockstep_rank(0, 3, 3), lockstep_rank(1, 3, 3)};
  v = judge_hang(idle, FallbackSuspect{1, "no progress beat for 9.0 s"});
  CHECK(v.kind == HangKind::kNoCollective);
  CHECK(v.culprits == std::vector<int>{1});
  CHECK(v.line == "hang: rank 1 (node0, local rank 1, pid 1001): no progress beat for 9.0 s");
}

TEST_CASE("records and verdicts travel as JSON unchanged", "[hang][json]") {
  RankRecord r = lockstep_rank(3, 1580, 1579);
  r.state = ProcessState::kStopped;
  r.beat_step = 42;
  const RankRecord back = nlohmann::json(r).get<RankRecord>();
  CHECK(back.rank == 3);
  CHECK(back.state == ProcessState::kStopped);
  CHECK(back.source == RecordSource::kRecorded);
  CHECK(back.beat_step == 42);
  CHECK(back.groups.at("0").ranks == std::vector<int>{0, 1, 2, 3});
  REQUIRE(back.entries.size() == r.entries.size());
  CHECK(back.entries.back().frames == r.entries.back().frames);
  CHECK(back.wait == r.wait);
  const std::vector<RankRecord> many = {r, lockstep_rank(0, 1, 1)};
  CHECK(nlohmann::json(many).get<std::vector<RankRecord>>().size() == 2);
  CHECK_THROWS_AS(nlohmann::json({{"rank", 1}, {"state", "sleeping"}}).get<RankRecord>(), ProtocolError);
}

TEST_CASE("the hook's dump is read, and a recorder turned off is said so", "[hang][json]") {
  RankRecord r;
  read_hook_dump(R"({"fr":"on","pid":7,"groups":{"0":{"ranks":[0,1],"last_enqueued":5,"last_completed":4}},
                     "entries":[{"group":"0","seq":5,"op":"all_reduce","sizes":"[[4]]","dtypes":"Float",
                                 "created_ms":12,"retired":false,"frames":[["/job/t.py",88,"step"]]}]})",
                 r);
  CHECK(r.source == RecordSource::kRecorded);
  REQUIRE(r.entries.size() == 1);
  CHECK(r.entries[0].frames == std::vector<std::string>{"/job/t.py:88 in step"});
  CHECK(r.threads.empty());
  // The hook lists its Python threads in every state of the recorder: what each waits on is read by their ids.
  read_hook_dump(R"({"fr":"off","pid":7,"threads":[{"tid":7,"name":"MainThread","frames":["/job/t.py:14 in main"],
                     "where":"main at t.py:14","call":"urlopen"},{"tid":9,"name":"meshrun-hook","meshrun":true}]})",
                 r);
  CHECK(r.source == RecordSource::kRecorderOff);
  REQUIRE(r.threads.size() == 2);
  CHECK(r.threads[0].tid == 7);
  CHECK(r.threads[0].call == "urlopen");
  CHECK(r.threads[0].frames == std::vector<std::string>{"/job/t.py:14 in main"});
  CHECK_FALSE(r.threads[0].meshrun);
  CHECK(r.threads[1].meshrun);
  CHECK(nlohmann::json(r).count("threads") == 0);  // read where the rank runs, never sent
  CHECK_THROWS_AS(read_hook_dump("{not json", r), ProtocolError);
}

TEST_CASE("hook messages: hello, status (group names with colons), dump answers, and nothing else", "[hang][hook]") {
  CHECK(is_hook_message("fr status 0:1:1"));
  CHECK_FALSE(is_hook_message("step=3"));
  auto m = parse_hook_message("fr hello pid=12 fr=off");
  CHECK(m.kind == HookMessage::Kind::kHello);
  CHECK_FALSE(m.recorder_on);
  m = parse_hook_message("fr status 0:12:11 my:pg:3:3");
  REQUIRE(m.groups.size() == 2);
  CHECK(m.groups.at("0").last_enqueued == 12);
  CHECK(m.groups.at("0").last_completed == 11);
  CHECK(m.groups.at("my:pg").last_completed == 3);
  CHECK(parse_hook_message("fr dumped /tmp/x.json").text == "/tmp/x.json");
  CHECK_THROWS_AS(parse_hook_message("fr status 0:x:1"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr shout"), ProtocolError);
}

TEST_CASE("hook messages: clock samples and arrival answers feed the watch", "[hang][hook]") {
  auto m = parse_hook_message("fr clock 1000 7000001000");
  CHECK(m.kind == HookMessage::Kind::kClock);
  CHECK(m.sent_ns == 1000);
  CHECK(m.remote_ns == 7000001000);
  m = parse_hook_message("fr arrivals 11 20 10 1795000000000000000 450000000 my pg");
  REQUIRE(m.kind == HookMessage::Kind::kArrivals);
  CHECK(m.arrivals.group == "my pg");  // the rest of the line: a name may hold spaces
  CHECK(m.arrivals.first_seq == 11);
  CHECK(m.arrivals.last_seq == 20);
  CHECK(m.arrivals.count == 10);
  CHECK(m.arrivals.mean_ns == 1795000000000000000);
  CHECK(m.arrivals.span_ns == 450000000);
  CHECK_THROWS_AS(parse_hook_message("fr clock 12"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr arrivals 1 2 3 4 5"), ProtocolError);
  CHECK_THROWS_AS(parse_hook_message("fr arrivals 1 2 x 4 5 0"), ProtocolError);

  CollectiveWatch w;
  const auto now = CollectiveWatch::Clock::now();
  w.on_message(parse_hook_message("fr clock 1000000 7001000000"), now, 2000000);  // worker 7 s ahead
  w.on_message(parse_hook_message("fr arrivals 1 2 2 5 1 0"), now);
  w.on_message(parse_hook_message("fr status 0:12:11"), now);
  REQUIRE(w.clock_offset());
  CHECK(w.clock_offset()->offset_s == Approx(6.9995));
  REQUIRE(w.arrivals());
  CHECK(w.arrivals()->count == 2);
  CHECK(w.completed().at("0") == 11);
}

TEST_CASE("arrival probes: answers go out once every running hooked rank answered, and the silent are asked again",
          "[hang][hook]") {
  meshrun::testing::TempDir dir;
  ProgressMonitor monitor(dir.path(), {4, 5, 6});
  ArrivalRelay relay(monitor);
  // Local ranks 0 and 1 run the hook: it listens on <progress socket>.hook and reports on <progress socket>.fr
  // (its own socket: the beats' never fills with reports). Local rank 2 never says hello.
  std::vector<BeatSocket> hooks;
  for (size_t lr = 0; lr < 2; ++lr) {
    hooks.emplace_back(monitor.socket_paths()[lr] + ".hook");
    REQUIRE(hooks[lr].send_to(monitor.socket_paths()[lr] + kHookReportSuffix, "fr hello pid=1 fr=on") == 0);
  }
  const auto answer = [&](size_t lr, const std::string& range) {
    REQUIRE(hooks[lr].send_to(monitor.socket_paths()[lr] + kHookReportSuffix, "fr arrivals " + range + " 4 5 1 0") ==
            0);
    monitor.drain(Clock::now());
  };
  const std::vector<pid_t> running = {101, 102, 103};
  const auto t0 = Clock::now();
  monitor.drain(t0);
  REQUIRE(monitor.watch(0).hooked());
  CHECK_FALSE(relay.take_answers(running));  // nothing asked yet

  const ArrivalProbe probe{.group = "0", .first_seq = 11, .last_seq = 14};
  relay.ask(probe, t0);
  for (auto& hook : hooks) CHECK(hook.drain() == std::vector<std::string>{"arrivals 11 14 0"});
  CHECK_FALSE(relay.take_answers(running));
  answer(0, "11 14");
  CHECK_FALSE(relay.take_answers(running));  // local rank 1 has not answered
  answer(1, "7 10");
  CHECK_FALSE(relay.take_answers(running));  // an answer to an older probe

  // The next heartbeat's reply carries the same probe (another node has not answered): nobody is asked
  // again for it. Within a second of the ask nobody is asked again; after it, only local rank 1, which has
  // not answered (its request or its answer may be lost).
  relay.ask(probe, t0 + ArrivalRelay::kAskAgainAfter);
  relay.ask_again(running, t0 + std::chrono::milliseconds(500));
  CHECK(hooks[0].drain().empty());
  CHECK(hooks[1].drain().empty());
  relay.ask_again(running, t0 + ArrivalRelay::kAskAgainAfter);
  CHECK(hooks[0].drain().empty());
  CHECK(hooks[1].drain() == std::vector<std::string>{"arrivals 11 14 0"});

  answer(1, "11 14");
  CHECK(relay.take_answers(running));
  CHECK_FALSE(relay.take_answers(running));                         // once
  relay.ask_again(running, t0 + 5 * ArrivalRelay::kAskAgainAfter);  // all answered: nobody
  CHECK(hooks[0].drain().empty());
  CHECK(hooks[1].drain().empty());

  // A rank whose worker exited is not waited for, nor asked again.
  relay.ask(ArrivalProbe{.group = "0", .first_seq = 15, .last_seq = 30}, t0);
  for (auto& hook : hooks) CHECK(hook.drain() == std::vector<std::string>{"arrivals 15 30 0"});
  answer(0, "15 30");
  CHECK_FALSE(relay.take_answers(running));
  const std::vector<pid_t> rank1_exited = {101, 0, 103};
  relay.ask_again(rank1_exited, t0 + ArrivalRelay::kAskAgainAfter);
  CHECK(hooks[1].drain().empty());
  CHECK(relay.take_answers(rank1_exited));

  // No probe open any more (the daemon counted or gave it up): the wait ends, nobody is asked again.
  relay.ask(ArrivalProbe{.group = "0", .first_seq = 31, .last_seq = 40}, t0);
  relay.ask(ArrivalProbe{}, t0);
  relay.ask_again(running, t0 + ArrivalRelay::kAskAgainAfter);
  CHECK(hooks[0].drain() == std::vector<std::string>{"arrivals 31 40 0"});  // the first ask only
  CHECK_FALSE(relay.take_answers(running));
}

TEST_CASE("the collective budget: armed from the first collective, learned from the cadence, never without a hook",
          "[hang][policy]") {
  HangPolicy policy;  // auto, floor 60 s
  const RankTracker no_beats(0);
  CollectiveWatch watch;
  CHECK_FALSE(policy.collective_budget_s(watch, no_beats));  // no hook
  const auto t0 = Clock::now();
  auto status = [&](int64_t enq, int64_t done, double at_s) {
    HookMessage m;
    m.kind = HookMessage::Kind::kStatus;
    m.groups["0"] = {enq, done};
    watch.on_message(m, t0 + std::chrono::milliseconds(static_cast<int>(at_s * 1000)));
  };
  status(1, 0, 0);  // one collective open, none completed yet: the floor alone (whoever is waited for is
                    // then judged stuck or busy: a long first step is busy)
  REQUIRE(policy.collective_budget_s(watch, no_beats));
  CHECK(*policy.collective_budget_s(watch, no_beats) == 60);
  REQUIRE(watch.oldest_wait());
  CHECK(watch.oldest_wait()->seq == 1);
  status(1, 1, 50);
  status(3, 2, 52);
  CHECK(*policy.collective_budget_s(watch, no_beats) == Approx(60 + 2 * 2.0));  // one gap: 2 s
  status(4, 3, 54);
  status(5, 5, 56);
  REQUIRE(policy.collective_budget_s(watch, no_beats));
  CHECK(*policy.collective_budget_s(watch, no_beats) == Approx(60 + 2 * 2.0));
  CHECK_FALSE(watch.oldest_wait());  // nothing open
  status(6, 5, 57);
  status(6, 5, 62);  // the same wait: its start is kept
  REQUIRE(watch.oldest_wait());
  CHECK(watch.oldest_wait()->since == t0 + std::chrono::seconds(57));
  policy.mode = HangPolicy::Mode::kFixed;
  policy.fixed_s = 7;
  CHECK(*policy.collective_budget_s(watch, no_beats) == 7);
  policy.mode = HangPolicy::Mode::kOff;
  CHECK_FALSE(policy.collective_budget_s(watch, no_beats));
}

TEST_CASE("identical stacks print once with their ranks, tool headers and other threads ignored", "[hang][stacks]") {
  const std::string waiting =
      "Process 4711: python train.py\nPython v3.11.7\n\nThread 4711 (idle): \"MainThread\"\n"
      "    all_reduce (torch/distributed/distributed_c10d.py:4181)\n    step (train.py:88)\n"
      "Thread 4712 (idle): \"meshrun-hook\"\n    _serve (_meshrun_hook.py:137)\n";
  std::string other_pid = waiting;
  other_pid.replace(other_pid.find("4711"), 4, "4800");
  const std::vector<RankStack> stacks = {
      {0, "py-spy", waiting},
      {1, "py-spy", other_pid},
      {2, "py-spy", waiting},
      {3, "py-spy", "Thread 9 (idle): \"MainThread\"\n    load_batch (data.py:12)\n    step (train.py:80)\n"},
  };
  CHECK(format_stack_groups(stacks) ==
        "  3 ranks (0-2) [py-spy]: all_reduce (torch/distributed/distributed_c10d.py:4181) <- step (train.py:88)\n"
        "  rank 3 [py-spy]: load_batch (data.py:12) <- step (train.py:80)\n");
  CHECK(stack_frames({0, "eu-stack", "PID 5 - worker\nTID 5:\n#0  0x00007f1 __futex_wait\n#1  0x00007f2 main\n"}) ==
        std::vector<std::string>{"__futex_wait", "main"});
}

TEST_CASE("rank lists are compact", "[hang][verdict]") {
  CHECK(format_ranks({3, 0, 1, 2}) == "0-3");
  CHECK(format_ranks({0, 2, 5}) == "0,2,5");
  CHECK(format_ranks({0, 1}) == "0,1");
  CHECK(format_ranks({7, 0, 1, 2}) == "0-2,7");
}

TEST_CASE("before any collective completed (PyTorch says -1), the open one is #1", "[hang][verdict]") {
  std::vector<RankRecord> ranks = {lockstep_rank(0, 1, -1), lockstep_rank(1, 1, -1), lockstep_rank(2, -1, -1),
                                   lockstep_rank(3, 1, -1)};
  const HangVerdict v = judge_hang(ranks, std::nullopt);
  CHECK(v.kind == HangKind::kNeverEntered);
  CHECK(v.seq == 1);
  CHECK(v.op == "all_reduce");
  CHECK(v.culprits == std::vector<int>{2});
  CollectiveWatch w;
  w.on_message(parse_hook_message("fr status 0:1:-1"), Clock::now());
  REQUIRE(w.oldest_wait());
  CHECK(w.oldest_wait()->seq == 1);
  CHECK(w.completions() == 0);
}

// Stuck or busy (launcher/activity/): the rule over /proc samples recorded from real processes on a Debian 12
// machine (proc_samples/record.py: a rank blocked on a lock, one checking once a second, a computing rank,
// a 20 MB/s save, a main process waiting on busy DataLoader workers, a silent and a streaming socket, a
// spin), over made-up samples at the noise thresholds, the tree walk (children files, and the scan when a
// kernel has none), the hook's stack reads, and the verdict that turns a busy culprit into a late rank.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "launcher/activity/activity_monitor.hpp"
#include "launcher/activity/activity_rule.hpp"
#include "launcher/activity/proc_tree.hpp"
#include "launcher/activity/wait_rule.hpp"
#include "launcher/hang/hang_verdict.hpp"
#include "launcher/progress/collective_watch.hpp"
#include "proto/agents/hang_request.hpp"
#include "support/subprocess.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
using namespace meshrun::proto;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

const std::string kSamples = PROC_SAMPLES_DIR;

struct Recorded {
  TreeSample t0, t1;
  std::string expect;
  long ticks_per_s = 100;
};

Recorded recorded(const std::string& name) {
  std::ifstream in(kSamples + "/" + name + "/meta.json");
  const auto meta = nlohmann::json::parse(in);
  Recorded r;
  const auto leader = meta.at("leader").get<pid_t>();
  const auto t0 = Clock::time_point(std::chrono::hours(1));
  const auto t1 = t0 + std::chrono::milliseconds(static_cast<int64_t>(meta.at("window_s").get<double>() * 1000));
  r.t0 = read_process_tree(kSamples + "/" + name + "/t0", leader, t0);
  r.t1 = read_process_tree(kSamples + "/" + name + "/t1", leader, t1);
  r.expect = meta.at("expect").get<std::string>();
  r.ticks_per_s = meta.at("ticks_per_s").get<long>();
  return r;
}

Activity judge_recorded(const std::string& name, const StackMotion& stack = {}) {
  const Recorded r = recorded(name);
  REQUIRE_FALSE(r.t0.empty());
  REQUIRE_FALSE(r.t1.empty());
  return judge_activity(r.t0, r.t1, stack, r.ticks_per_s);
}

// A made-up process for threshold cases.
ProcessSample process(pid_t pid, uint64_t ticks, uint64_t read, uint64_t written, uint64_t wakeups, char state = 'S') {
  return ProcessSample{pid, state, ticks, read, written, wakeups, true};
}

TreeSample tree(double at_s, std::vector<ProcessSample> processes) {
  return TreeSample{Clock::time_point(std::chrono::milliseconds(static_cast<int64_t>(at_s * 1000))),
                    std::move(processes)};
}

// A file under a fake /proc.
void put(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string stat_line(pid_t pid, pid_t parent, char state, int utime) {
  return std::to_string(pid) + " (py thon) " + state + " " + std::to_string(parent) + " 1 1 0 -1 4194304 98 0 0 0 " +
         std::to_string(utime) + " 3 0 0 20 0 1 0 35302 3133440 382\n";
}

void fake_process(const fs::path& root, pid_t pid, pid_t parent, int utime, const std::string& children,
                  bool with_children_files = true) {
  const fs::path dir = root / std::to_string(pid);
  put(dir / "stat", stat_line(pid, parent, 'S', utime));
  put(dir / "io", "rchar: 100\nwchar: 200\nsyscr: 1\nsyscw: 1\nread_bytes: 0\nwrite_bytes: 0\n");
  put(dir / "status", "Name:\tpython\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t1\n");
  if (with_children_files) put(dir / "task" / std::to_string(pid) / "children", children);
}

HangVerdict judge_with(std::vector<RankRecord> ranks, const LatenessRule& rule,
                       std::optional<FallbackSuspect> fallback = FallbackSuspect{0, "waits in collective #10"}) {
  return judge_hang(ranks, fallback, rule);
}

RankRecord rank_in_barrier(int rank, bool entered) {
  RankRecord r;
  r.rank = rank;
  r.local_rank = rank;
  r.host = "node0";
  r.pid = 100 + rank;
  r.source = RecordSource::kRecorded;
  r.groups["0"] = GroupProgress{{0, 1, 2}, entered ? 10 : 9, 9};
  if (entered) {
    r.entries.push_back(CollectiveEntry{.group = "0",
                                        .seq = 10,
                                        .op = "barrier",
                                        .sizes = "[[1]]",
                                        .dtypes = "Float",
                                        .created_unix_ms = 1'700'000'000'000,
                                        .retired = false,
                                        .frames = {"/job/train.py:20 in main"}});
  }
  return r;
}

Activity busy_saving() {
  Activity a;
  a.liveness = Liveness::kBusy;
  a.window_s = 10;
  a.processes = 1;
  a.cpu_cores = 0.97;
  a.write_bytes_per_s = 19.8e6;
  a.where = "save at train.py:14";
  return a;
}

// What an idle rank waits on, as its agent judged it.
RankWait waits_on_lock() {
  RankWait w;
  w.read = true;
  w.place = WaitPlace::kInside;
  w.phrase = "waits on a lock, an event or a queue that nothing else in its tree can release";
  w.where = "acquire at train.py:31";
  return w;
}

RankWait waits_on_service() {
  RankWait w;
  w.read = true;
  w.place = WaitPlace::kOutside;
  w.phrase = "waits on a reply from 127.0.0.1:18765 (HTTP) (pid 4242 (python eval_server.py))";
  w.where = "urlopen at train.py:14";
  return w;
}

Activity idle_on_lock() {
  Activity a;
  a.liveness = Liveness::kIdle;
  a.window_s = 10;
  a.processes = 1;
  a.stack_known = true;
  a.where = "wait_for_peer at train.py:31";
  return a;
}

}  // namespace

TEST_CASE(
    "recorded ranks: blocked on a lock, a sleep loop or a silent socket are idle, and computing, saving, "
    "waiting on busy DataLoader workers, streaming a socket or spinning are busy",
    "[activity]") {
  for (const std::string name : {"idle_lock", "idle_sleep_loop", "socket_silent", "compute", "save_20mbs", "dataloader",
                                 "socket_stream", "spin"}) {
    INFO(name);
    const Activity a = judge_recorded(name);
    CHECK(std::string(to_string(a.liveness)) == recorded(name).expect);
    CHECK(a.window_s == Approx(10).margin(0.5));
  }
  // What each was judged on, as the late line says it.
  CHECK_THAT(describe(judge_recorded("save_20mbs")), Catch::Matches(R"(busy \(0\.0\d CPU, writing 2\d\.\d MB/s\))"));
  CHECK_THAT(describe(judge_recorded("compute")), Catch::Matches(R"(busy \(\d\.\d\d CPU\))"));
  const Activity loader = judge_recorded("dataloader");  // the main process waits; its two workers compute
  CHECK(loader.processes == 3);
  CHECK(loader.cpu_cores > 1);
  CHECK_THAT(describe(loader), Catch::StartsWith("busy (3 processes: "));
  // recv() is not counted in /proc/<pid>/io: a socket stream is seen by its main thread's wake-ups.
  const Activity stream = judge_recorded("socket_stream");
  CHECK(stream.read_bytes_per_s == 0);
  CHECK(stream.cpu_cores < ActivityNoise::kCpuCores);
  CHECK_THAT(describe(stream), Catch::Matches(R"(busy \(0\.\d\d CPU, waking \d+ times/s\))"));
  // The sleep loop wakes once a second: under the noise threshold.
  CHECK(judge_recorded("idle_sleep_loop").wakeups_per_s == Approx(1).margin(0.2));
  CHECK_THAT(describe(judge_recorded("idle_lock")), Catch::StartsWith("idle for 10 s (0.00 CPU, no I/O"));
}

TEST_CASE("the noise thresholds: a little CPU, a few log lines, a wake-up a second stay idle", "[activity]") {
  const auto judge = [](ProcessSample before, ProcessSample after) {
    return judge_activity(tree(0, {before}), tree(10, {after}), {}, 100);
  };
  // The hook's polling: 2 ticks of CPU, 3 kB of log, 10 wake-ups in 10 s.
  CHECK(judge(process(7, 500, 0, 0, 40), process(7, 502, 0, 3000, 50)).liveness == Liveness::kIdle);
  // Just over each threshold: 5 % of a core, 64 KiB/s, 50 wake-ups/s; a loop sleeping 50 ms at a time
  // (20 wake-ups/s) waits for something: idle.
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 50, 0, 0, 0)).liveness == Liveness::kBusy);
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 49, 0, 0, 0)).liveness == Liveness::kIdle);
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 0, 655360, 0, 0)).liveness == Liveness::kBusy);
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 0, 655359, 0, 0)).liveness == Liveness::kIdle);
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 0, 0, 0, 500)).liveness == Liveness::kBusy);
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 0, 0, 0, 200)).liveness == Liveness::kIdle);
  // Stopped by a signal, whatever else; in a disk wait with nothing moving, idle and said so.
  CHECK(judge(process(7, 0, 0, 0, 0), process(7, 900, 0, 0, 0, 'T')).liveness == Liveness::kStopped);
  const Activity disk = judge(process(7, 0, 0, 0, 0, 'D'), process(7, 0, 0, 0, 0, 'D'));
  CHECK(disk.liveness == Liveness::kIdle);
  CHECK_THAT(describe(disk), Catch::Contains("uninterruptible wait (state D)"));
}

TEST_CASE(
    "a tree: children born in the window count whole, a reaped child's time moves to its parent, a "
    "short window or another process is not judged",
    "[activity]") {
  // The worker idles; a child born during the window computed 3 s of it.
  Activity a = judge_activity(tree(0, {process(10, 100, 0, 0, 0)}),
                              tree(10, {process(10, 100, 0, 0, 0), process(11, 300, 0, 0, 0)}), {}, 100);
  CHECK(a.liveness == Liveness::kBusy);
  CHECK(a.processes == 2);
  CHECK(a.cpu_cores == Approx(0.3));
  // A child that computed and was reaped: its time shows in the parent's cutime, never as a drop.
  a = judge_activity(tree(0, {process(10, 100, 0, 0, 0), process(11, 200, 0, 0, 0)}),
                     tree(10, {process(10, 600, 0, 0, 0)}), {}, 100);
  CHECK(a.cpu_cores == Approx(0.5));
  // The stack moved: busy even with nothing else.
  StackMotion moved{true, true, "evaluate at train.py:40"};
  a = judge_activity(tree(0, {process(10, 0, 0, 0, 0)}), tree(10, {process(10, 0, 0, 0, 0)}), moved, 100);
  CHECK(a.liveness == Liveness::kBusy);
  CHECK(describe(a) == "busy (0.00 CPU, its Python stack moves) in evaluate at train.py:40");
  // One second is too short; a new pid (another attempt's worker) is not compared; a gone worker neither.
  CHECK(judge_activity(tree(0, {process(10, 0, 0, 0, 0)}), tree(1, {process(10, 0, 0, 0, 0)}), {}, 100).liveness ==
        Liveness::kUnknown);
  CHECK(judge_activity(tree(0, {process(10, 0, 0, 0, 0)}), tree(10, {process(12, 0, 0, 0, 0)}), {}, 100).liveness ==
        Liveness::kUnknown);
  CHECK(judge_activity(tree(0, {process(10, 0, 0, 0, 0)}), tree(10, {}), {}, 100).liveness == Liveness::kUnknown);
}

TEST_CASE("the process tree is read from every thread's children file, or by scanning parents", "[activity]") {
  meshrun::testing::TempDir dir;
  for (const bool children_files : {true, false}) {
    INFO("children files: " << children_files);
    const fs::path root = fs::path(dir.path()) / (children_files ? "with" : "without");
    fake_process(root, 100, 1, 50, "101 102 ", children_files);
    fake_process(root, 101, 100, 10, "", children_files);
    fake_process(root, 102, 100, 20, "", children_files);
    fake_process(root, 103, 105, 30, "", children_files);  // a grandchild through a thread of 100 ...
    fake_process(root, 200, 1, 99, "", children_files);    // ... and an unrelated process
    if (children_files) {
      put(root / "100" / "task" / "105" / "children", "103\n");
    } else {
      put(root / "103" / "stat", stat_line(103, 100, 'S', 30));  // without children files, ppid is the process
    }
    const TreeSample t = read_process_tree(root.string(), 100, Clock::now());
    REQUIRE(t.processes.size() == 4);
    CHECK(t.processes.front().pid == 100);
    CHECK(t.leader_state() == 'S');
    std::vector<pid_t> pids;
    for (const auto& p : t.processes) pids.push_back(p.pid);
    std::sort(pids.begin(), pids.end());
    CHECK(pids == std::vector<pid_t>{100, 101, 102, 103});
    CHECK(t.processes.front().cpu_ticks == 53);  // utime 50 + stime 3
    CHECK(t.processes.front().write_bytes == 200);
    CHECK(t.processes.front().wakeups == 7);
    CHECK(read_process_tree(root.string(), 999, Clock::now()).empty());  // gone
  }
}

TEST_CASE("the monitor judges the last 10 s of its samples, fewer while it has fewer or the wait is shorter",
          "[activity]") {
  meshrun::testing::TempDir dir;
  const fs::path root = dir.path();
  ActivityMonitor monitor(1, root.string());
  const auto t0 = Clock::now();
  CHECK(monitor.activity(0, {}).liveness == Liveness::kUnknown);  // never sampled
  for (int s = 0; s <= 14; ++s) {
    fake_process(root, 100, 1, s < 8 ? s * 100 : 700, "");  // computes for 7 s, then idles
    CHECK(monitor.sample({100}, t0 + std::chrono::seconds(s)));
    CHECK_FALSE(monitor.sample({100}, t0 + std::chrono::seconds(s) + std::chrono::milliseconds(500)));  // not due
    if (s == 1) CHECK(monitor.activity(0, {}).liveness == Liveness::kUnknown);                          // 1 s watched
    if (s == 5) CHECK(monitor.activity(0, {}).liveness == Liveness::kBusy);  // 5 s watched, all busy
  }
  const Activity now = monitor.activity(0, {});  // the window 4..14 s: 3 s of compute in 10 s
  CHECK(now.window_s == Approx(10));
  CHECK(now.cpu_cores == Approx(0.3));
  CHECK(monitor.window_start(0) == t0 + std::chrono::seconds(4));
  // The others have waited 3 s only: what it did before (compute) says nothing about now (idle).
  const Activity since_waiting = monitor.activity(0, {}, t0 + std::chrono::seconds(11));
  CHECK(since_waiting.window_s == Approx(3));
  CHECK(since_waiting.liveness == Liveness::kIdle);
  monitor.sample({0}, t0 + std::chrono::seconds(20));  // the worker exited
  CHECK(monitor.activity(0, {}).liveness == Liveness::kUnknown);
}

TEST_CASE("the monitor's window never starts before the wait, though its newest sample is a second old", "[activity]") {
  meshrun::testing::TempDir dir;
  const fs::path root = dir.path();
  ActivityMonitor monitor(1, root.string());
  const auto t0 = Clock::now();
  for (int s = 0; s <= 19; ++s) {
    fake_process(root, 100, 1, 0, "");
    // Start-up reads its files until 9.3 s, when it begins to wait on an event nothing sets; the others begin
    // waiting for it then too. The judge asks at 19.9 s: the newest sample is 0.9 s old.
    if (s >= 10) put(root / "100" / "io", "rchar: 1000100\nwchar: 200\n");
    monitor.sample({100}, t0 + std::chrono::seconds(s));
  }
  const auto wait_began = t0 + std::chrono::milliseconds(9300);
  const Activity a = monitor.activity(0, {}, wait_began);
  CHECK(a.liveness == Liveness::kIdle);  // not "reading 100 kB/s": the start-up's last megabyte came before
  CHECK(a.window_s == Approx(9));
  CHECK(monitor.window_start(0, wait_began) == t0 + std::chrono::seconds(10));
  CHECK(monitor.activity(0, {}).liveness == Liveness::kBusy);  // with no wait to start from: the last 10 s
  // A wait of 1.5 s has one sample in it: too few to judge, the window reaches back one sample before it.
  CHECK(monitor.window_start(0, t0 + std::chrono::milliseconds(17500)) == t0 + std::chrono::seconds(17));
}

TEST_CASE("the hook's stack reads: parsed, and moved or unchanged over a window", "[activity][hook]") {
  const auto m = parse_hook_message(R"(fr frames {"frames": ["/job/t.py:14 in save", "/job/t.py:40 in main"], )"
                                    R"("where": "save at t.py:14"})");
  REQUIRE(m.kind == HookMessage::Kind::kFrames);
  CHECK(m.frames == std::vector<std::string>{"/job/t.py:14 in save", "/job/t.py:40 in main"});
  CHECK(m.where == "save at t.py:14");
  CHECK_THROWS(parse_hook_message("fr frames [1, 2]"));
  CollectiveWatch w;
  const auto t0 = Clock::now();
  CHECK_FALSE(w.stack_motion(t0).known);
  w.on_message(m, t0 + std::chrono::seconds(1));
  CHECK_FALSE(w.stack_motion(t0).known);  // one read: nothing to compare
  w.on_message(m, t0 + std::chrono::seconds(3));
  CHECK(w.stack_motion(t0).known);
  CHECK_FALSE(w.stack_motion(t0).moved);
  CHECK(w.stack_motion(t0).where == "save at t.py:14");
  auto moved = m;
  moved.frames.front() = "/job/t.py:15 in save";
  w.on_message(moved, t0 + std::chrono::seconds(5));
  CHECK(w.stack_motion(t0).moved);
  CHECK_FALSE(w.stack_motion(t0 + std::chrono::seconds(4)).known);  // only the last read is that recent
}

TEST_CASE("activity travels with a rank's record as JSON", "[activity][json]") {
  Activity a = busy_saving();
  a.state = 'S';
  const Activity back = nlohmann::json(a).get<Activity>();
  CHECK(back.liveness == Liveness::kBusy);
  CHECK(back.state == 'S');
  CHECK(back.write_bytes_per_s == a.write_bytes_per_s);
  CHECK(back.where == a.where);
  CHECK(nlohmann::json::object().get<Activity>().liveness == Liveness::kUnknown);  // an older agent's record
  RankRecord r = rank_in_barrier(0, false);
  r.activity = a;
  CHECK(nlohmann::json(r).get<RankRecord>().activity.cpu_cores == a.cpu_cores);
}

TEST_CASE(
    "a busy rank the others wait for is late; an idle one is hung only when it waits inside the job, late when it "
    "waits outside or meshrun cannot tell; a stopped one is hung",
    "[activity][verdict]") {
  std::vector<RankRecord> ranks = {rank_in_barrier(0, false), rank_in_barrier(1, true), rank_in_barrier(2, true)};
  const LatenessRule after_61s{61.2, std::nullopt, std::nullopt};

  ranks[0].activity = busy_saving();
  HangVerdict v = judge_with(ranks, after_61s);
  CHECK(v.kind == HangKind::kNeverEntered);
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK(v.culprits == std::vector<int>{0});
  CHECK(v.line ==
        "rank 0 (node0) is late: it has not entered barrier #10 of group 0 (ranks 0-2) for 61 s while ranks 1,2 "
        "wait; it is busy (0.97 CPU, writing 19.8 MB/s) in save at train.py:14");
  CHECK(nlohmann::json(v).at("outcome") == "late");

  ranks[0].activity = idle_on_lock();
  ranks[0].wait = waits_on_lock();
  v = judge_with(ranks, after_61s);
  CHECK(v.outcome == HangOutcome::kHung);
  CHECK_THAT(v.line, Catch::StartsWith("hang: rank 0 (node0, local rank 0, pid 100) never entered barrier #10"));
  CHECK(std::find(v.notes.begin(), v.notes.end(),
                  "rank 0 is idle for 10 s (0.00 CPU, no I/O, its Python stack unchanged) in wait_for_peer at "
                  "train.py:31") != v.notes.end());
  CHECK(std::find(v.notes.begin(), v.notes.end(),
                  "rank 0 waits on a lock, an event or a queue that nothing else in its tree can release, in acquire "
                  "at train.py:31") != v.notes.end());

  // Idle, but on a service outside the job: late, as under torchrun, with what it waits on.
  ranks[0].wait = waits_on_service();
  v = judge_with(ranks, after_61s);
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK(v.line ==
        "rank 0 (node0) is late: it has not entered barrier #10 of group 0 (ranks 0-2) for 61 s while ranks 1,2 "
        "wait; it waits on a reply from 127.0.0.1:18765 (HTTP) (pid 4242 (python eval_server.py)), in urlopen at "
        "train.py:14");

  // What it waits on could not be classified, or not read (an agent of another version): late, not hung.
  ranks[0].wait.place = WaitPlace::kUnknown;
  CHECK(judge_with(ranks, after_61s).outcome == HangOutcome::kLate);
  ranks[0].wait = RankWait{};
  v = judge_with(ranks, after_61s);
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK_THAT(v.line, Catch::EndsWith("it is idle for 10 s (0.00 CPU, no I/O, its Python stack unchanged) in "
                                     "wait_for_peer at train.py:31, and meshrun could not read what it waits on"));
  ranks[0].activity = Activity{};
  CHECK(judge_with(ranks, after_61s).outcome == HangOutcome::kLate);

  ranks[0].activity = busy_saving();
  ranks[0].state = ProcessState::kStopped;  // the state in /proc wins
  CHECK(judge_with(ranks, after_61s).kind == HangKind::kStopped);
  CHECK(judge_with(ranks, after_61s).outcome == HangOutcome::kHung);
}

TEST_CASE(
    "the outside timeout (--hang-outside-timeout): a rank waiting outside the job keeps the others only that "
    "long",
    "[activity][verdict]") {
  std::vector<RankRecord> ranks = {rank_in_barrier(0, false), rank_in_barrier(1, true), rank_in_barrier(2, true)};
  ranks[0].activity = idle_on_lock();
  ranks[0].wait = waits_on_service();
  CHECK(judge_with(ranks, LatenessRule{89, std::nullopt, 90.0}).outcome == HangOutcome::kLate);
  CHECK(judge_with(ranks, LatenessRule{95, 60.0, std::nullopt}).outcome == HangOutcome::kLate);  // not busy
  const HangVerdict v = judge_with(ranks, LatenessRule{90.3, std::nullopt, 90.0});
  CHECK(v.outcome == HangOutcome::kHung);
  CHECK(v.line ==
        "hang: rank 0 (node0, local rank 0, pid 100) has kept ranks 1,2 waiting in barrier #10 of group 0 (ranks "
        "0-2) for 90 s, past --hang-outside-timeout (90 s); it waits on a reply from 127.0.0.1:18765 (HTTP) (pid "
        "4242 (python eval_server.py)), in urlopen at train.py:14");
}

TEST_CASE("a wait on another host's address where another rank listens is a wait on that rank: inside",
          "[activity][verdict]") {
  std::vector<RankRecord> ranks = {rank_in_barrier(0, false), rank_in_barrier(1, true), rank_in_barrier(2, true)};
  ranks[0].activity = idle_on_lock();
  ranks[0].wait = waits_on_service();
  ranks[0].wait.phrase = "waits on a reply from 10.0.0.2:41000";
  ranks[0].wait.remotes = {"10.0.0.2:41000"};
  CHECK(judge_with(ranks, LatenessRule{61, std::nullopt, std::nullopt}).outcome == HangOutcome::kLate);
  ranks[2].wait.listening = {"10.0.0.2:41000"};
  const HangVerdict v = judge_with(ranks, LatenessRule{61, std::nullopt, std::nullopt});
  CHECK(v.outcome == HangOutcome::kHung);
  CHECK(std::find(v.notes.begin(), v.notes.end(),
                  "rank 0 waits on 10.0.0.2:41000, where rank 2 listens, in urlopen at train.py:14") != v.notes.end());
}

TEST_CASE("the busy timeout (--hang-busy-timeout): a busy rank keeps the others waiting only that long",
          "[activity][verdict]") {
  std::vector<RankRecord> ranks = {rank_in_barrier(0, false), rank_in_barrier(1, true), rank_in_barrier(2, true)};
  ranks[0].activity = busy_saving();
  CHECK(judge_with(ranks, LatenessRule{299, 300.0, std::nullopt}).outcome == HangOutcome::kLate);
  const HangVerdict v = judge_with(ranks, LatenessRule{300.4, 300.0, std::nullopt});
  CHECK(v.outcome == HangOutcome::kHung);
  CHECK(v.line ==
        "hang: rank 0 (node0, local rank 0, pid 100) has kept ranks 1,2 waiting in barrier #10 of group 0 (ranks "
        "0-2) for 300 s, past --hang-busy-timeout (300 s); it is busy (0.97 CPU, writing 19.8 MB/s) in save at "
        "train.py:14");
}

TEST_CASE("several ranks never entered: the idle ones are hung, the busy ones only late, and beats alone too",
          "[activity][verdict]") {
  std::vector<RankRecord> ranks = {rank_in_barrier(0, false), rank_in_barrier(1, true), rank_in_barrier(2, false)};
  ranks[0].activity = busy_saving();
  ranks[2].activity = idle_on_lock();
  ranks[2].wait = waits_on_lock();
  HangVerdict v = judge_with(ranks, LatenessRule{70, std::nullopt, std::nullopt});
  CHECK(v.outcome == HangOutcome::kHung);
  CHECK(v.culprits == std::vector<int>{2});
  CHECK_THAT(v.line, Catch::StartsWith("hang: rank 2 (node0, local rank 2, pid 102) never entered barrier #10"));
  CHECK(std::find(v.notes.begin(), v.notes.end(),
                  "rank 0 is late, not hung: it is busy (0.97 CPU, writing 19.8 MB/s) in save at train.py:14") !=
        v.notes.end());
  ranks[2].activity = busy_saving();
  v = judge_with(ranks, LatenessRule{70, std::nullopt, std::nullopt});
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK_THAT(v.line, Catch::StartsWith("ranks 0,2 (node0) are late: they have not entered barrier #10"));

  // No collective open anywhere: the suspicion from beats names the rank, judged the same way.
  std::vector<RankRecord> quiet = {rank_in_barrier(0, false), rank_in_barrier(1, false)};
  quiet[1].activity = busy_saving();
  v = judge_with(quiet, LatenessRule{65, std::nullopt, std::nullopt},
                 FallbackSuspect{1, "no progress beat for 65.0 s (budget 64.0 s) after step 9 (train)"});
  CHECK(v.kind == HangKind::kNoCollective);
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK(v.line ==
        "rank 1 (node0) is late: no progress beat for 65.0 s (budget 64.0 s) after step 9 (train); it is busy (0.97 "
        "CPU, writing 19.8 MB/s) in save at train.py:14");
}

TEST_CASE("hang requests travel as JSON, and another agent's text reads as an unknown rank", "[activity][json]") {
  const proto::HangRequest r{1, 3, "waits in collective #21 of group 0 for 61.0 s (budget 60.0 s)", 61.04};
  CHECK(proto::decode_hang_request(proto::encode(r)) == r);
  const auto old = proto::decode_hang_request("1 3 no progress beat for 9 s");
  CHECK(old.rank == -1);
  CHECK(old.reason == "1 3 no progress beat for 9 s");
}

TEST_CASE("every rank inside one collective: slow while a member is busy, a stalled transport while all are idle",
          "[activity][verdict]") {
  std::vector<RankRecord> inside = {rank_in_barrier(0, true), rank_in_barrier(1, true), rank_in_barrier(2, true)};
  for (auto& r : inside) r.activity = idle_on_lock();
  HangVerdict v = judge_with(inside, LatenessRule{70, std::nullopt, std::nullopt});
  CHECK(v.kind == HangKind::kAllInside);
  CHECK(v.outcome == HangOutcome::kHung);
  // Rank 1 entered last, having computed until then (or the transfer itself is large and moving): late.
  inside[1].activity = busy_saving();
  v = judge_with(inside, LatenessRule{70, std::nullopt, std::nullopt});
  CHECK(v.kind == HangKind::kAllInside);
  CHECK(v.outcome == HangOutcome::kLate);
  CHECK(v.line ==
        "barrier #10 of group 0 (ranks 0-2) is late: every rank entered it and it has not completed for 70 s; rank 1 "
        "is busy (0.97 CPU, writing 19.8 MB/s) in save at train.py:14");
  CHECK(judge_with(inside, LatenessRule{70, 60.0, std::nullopt}).outcome ==
        HangOutcome::kHung);  // past --hang-busy-timeout
}

TEST_CASE("a suspected wait that completed before the records were read is resolved, not a hang",
          "[activity][verdict]") {
  // Rank 0 was found waiting in a collective; by the time every record was read, nothing was open any more.
  const std::vector<RankRecord> done = {rank_in_barrier(0, false), rank_in_barrier(1, false)};
  HangVerdict v =
      judge_hang(done, FallbackSuspect{1, "waits in collective #10 of group 0 for 90.2 s", true}, {90, {}, {}});
  CHECK(v.outcome == HangOutcome::kResolved);
  // The same records after a suspicion from silence: the silent rank is still judged.
  v = judge_hang(done, FallbackSuspect{1, "no progress beat for 90.2 s", false}, {90, {}, {}});
  CHECK(v.kind == HangKind::kNoCollective);
  CHECK(v.outcome == HangOutcome::kLate);  // nothing is known of what it does: late, not hung
  CHECK(proto::decode_hang_request(proto::encode(proto::HangRequest{0, 1, "x", 2, proto::SuspicionRoute::kSilence}))
            .route == proto::SuspicionRoute::kSilence);
}

// Late or hung (launcher/activity/wait_rule.hpp): what an idle rank waits on, judged inside the job (proof of a
// hang) or outside it (late), over waits recorded from real processes on a Debian 12 machine (wait_samples/record.py:
// an HTTP reply from a slow service, a sleep loop polling a file, a lock taken twice, an event nothing sets, a child
// waiting on a service, a busy child, a thread downloading slowly, a named pipe fed from outside, a pipe to itself, a
// socket to another process of the job), over made-up trees for the rules about threads, children and addresses,
// the system-call decoding and the socket tables, and the verdict that makes a rank waiting outside late.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/activity/socket_table.hpp"
#include "launcher/activity/wait_call.hpp"
#include "launcher/activity/wait_probe.hpp"
#include "launcher/activity/wait_rule.hpp"
#include "launcher/hang/hang_verdict.hpp"

using namespace meshrun;
using namespace meshrun::launcher;
namespace fs = std::filesystem;

namespace {

const std::string kSamples = WAIT_SAMPLES_DIR;

struct Sample {
  std::string expect;
  std::string phrase;
  TreeWaits tree;
  std::vector<PythonThread> python;
  JobPeers peers;
};

Sample sample(const std::string& name) {
  std::ifstream in(kSamples + "/" + name + ".json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  Sample s;
  s.expect = j.at("expect").get<std::string>();
  s.phrase = j.at("phrase").get<std::string>();
  s.tree = j.at("tree").get<TreeWaits>();
  for (const auto& t : j.at("python")) {
    s.python.push_back(PythonThread{t.at("tid").get<int64_t>(), t.value("name", ""),
                                    t.value("frames", std::vector<std::string>{}), t.value("where", ""),
                                    t.value("call", ""), t.value("meshrun", false)});
  }
  for (const auto& pid : j.at("peers").at("pids")) s.peers.pids.insert(pid.get<pid_t>());
  return s;
}

ThreadWait thread(pid_t tid, WaitCall call, std::vector<int> fds = {}, bool timed = false) {
  ThreadWait t;
  t.tid = tid;
  t.name = "python";
  t.state = 'S';
  t.call = call;
  t.syscall = std::string(to_string(call));
  t.fds = std::move(fds);
  t.timed = timed;
  t.idle_s = 61;
  return t;
}

FdTarget tcp(int fd, const std::string& remote, std::vector<FdHolder> peers = {}) {
  FdTarget t;
  t.fd = fd;
  t.kind = FdKind::kTcp;
  t.local = "10.0.0.1:40000";
  t.remote = remote;
  t.peers = std::move(peers);
  t.peers_known = true;
  return t;
}

// A worker (pid 100) whose main thread waits on a lock, with the given other threads and descriptors.
TreeWaits lock_tree(std::vector<ThreadWait> others, std::map<int, FdTarget> fds = {}) {
  ProcessWaits p;
  p.pid = 100;
  p.parent = 1;
  p.command = "python train.py";
  p.threads.push_back(thread(100, WaitCall::kLock));
  for (auto& t : others) p.threads.push_back(std::move(t));
  p.fds = std::move(fds);
  TreeWaits tree;
  tree.processes.push_back(std::move(p));
  tree.read_at_unix_ms = 1'700'000'061'000;
  return tree;
}

PythonThread py(int64_t tid, const std::string& name, bool meshrun = false) {
  return PythonThread{tid, name, {}, "", "", meshrun};
}

}  // namespace

TEST_CASE(
    "recorded ranks: a service's reply, a sleep loop, a child or a thread waiting on a service, a pipe fed from "
    "outside are outside the job; a lock or an event nothing releases, a pipe to itself, a job's socket are inside",
    "[wait]") {
  for (const std::string name : {"http_reply", "sleep_poll", "lock_twice", "event_unset", "child_http", "child_busy",
                                 "thread_download", "fifo_outside", "pipe_self", "job_socket"}) {
    INFO(name);
    const Sample s = sample(name);
    const RankWait w = judge_wait(s.tree, s.python, s.peers);
    INFO(w.phrase);
    CHECK(std::string(to_string(w.place)) == s.expect);
    CHECK(std::regex_search(w.phrase, std::regex(s.phrase)));
    CHECK(w.read);
  }
  // The user's frame and the library call it made, and when the wait began.
  const Sample http = sample("http_reply");
  const RankWait w = judge_wait(http.tree, http.python, http.peers);
  CHECK_THAT(w.where, Catch::Matches(R"(urlopen at rank_http_reply\.py:\d+)"));
  CHECK(w.since_unix_ms > 0);
  CHECK(w.since_unix_ms <= http.tree.read_at_unix_ms);
  // The remote address alone does not make it outside: its holder on this host was found.
  CHECK(w.remotes.empty());
  // Torch's and Gloo's own threads are there, and none of them made the lock a way out.
  const Sample lock = sample("lock_twice");
  CHECK(lock.tree.processes.front().threads.size() > 4);
}

TEST_CASE("a live thread's idle time is how long it has slept, never more than its process has lived", "[wait]") {
  // The kernel's /proc/uptime runs ahead of the scheduler's clock by a VM's stolen time (minutes on a busy CI
  // machine): read against it, a wait of seconds read as minutes, "since" before the process started.
  const auto forked = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  auto state = [&] {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
  };
  while (state() != 'S') std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const TreeWaits tree = read_tree_waits("/proc", child);
  const double lived_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - forked).count();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  REQUIRE(tree.processes.size() == 1);
  REQUIRE(tree.processes.front().threads.size() == 1);
  const double idle = tree.processes.front().threads.front().idle_s;
  CHECK(idle >= 0.95);  // asleep since before the second began (the scheduler's clock ticks in milliseconds)
  CHECK(idle <= lived_s + 0.05);
}

TEST_CASE("a recorded service on this host seen as one of the job's processes is inside", "[wait]") {
  Sample s = sample("http_reply");
  const RankWait outside = judge_wait(s.tree, s.python, s.peers);
  REQUIRE(outside.place == WaitPlace::kOutside);
  // The same wait, had the service been another worker of the job: the holder's pid is the job's.
  for (const auto& [fd, target] : s.tree.processes.front().fds) {
    for (const auto& h : target.peers) s.peers.pids.insert(h.pid);
  }
  CHECK(judge_wait(s.tree, s.python, s.peers).place == WaitPlace::kInside);
}

TEST_CASE("a lock is a way out only through a thread or a child that waits outside or runs", "[wait]") {
  // Only native threads besides: their sleeps, locks and sockets to other hosts are their library's.
  ThreadWait sleeper = thread(101, WaitCall::kSleep, {}, true);
  ThreadWait gloo = thread(102, WaitCall::kDescriptors, {7});
  RankWait w = judge_wait(lock_tree({sleeper, gloo}, {{7, tcp(7, "10.0.0.2:41000")}}), {}, {});
  CHECK(w.place == WaitPlace::kInside);
  CHECK_THAT(w.phrase, Catch::StartsWith("waits on a lock, an event or a queue that nothing else in its tree"));

  // The same sleeping thread is the script's own (Python): it polls, and may set the event.
  const TreeWaits tree = lock_tree({sleeper, gloo}, {{7, tcp(7, "10.0.0.2:41000")}});
  w = judge_wait(tree, {py(100, "MainThread"), py(101, "poller")}, {});
  CHECK(w.place == WaitPlace::kOutside);
  CHECK(w.phrase == "waits on its thread 'poller' (101), which sleeps (a timed wait that ends by itself)");

  // meshrun's hook thread is never a way out.
  w = judge_wait(tree, {py(100, "MainThread"), py(101, "meshrun-hook", true)}, {});
  CHECK(w.place == WaitPlace::kInside);

  // A native thread reading a socket from a process on this host outside the job, or a running one, counts.
  w = judge_wait(lock_tree({gloo}, {{7, tcp(7, "127.0.0.1:8080", {FdHolder{555, false, "eval-server"}})}}), {}, {});
  CHECK(w.place == WaitPlace::kOutside);
  CHECK(w.phrase ==
        "waits on its thread 102 (python), which waits on a reply from 127.0.0.1:8080 (pid 555 "
        "(eval-server))");
  ThreadWait running = thread(103, WaitCall::kRunning);
  running.state = 'R';
  CHECK(judge_wait(lock_tree({running}), {}, {}).place == WaitPlace::kUnknown);

  // A child that sleeps (a shell polling for a file) is a way out; one blocked on its own lock is not.
  TreeWaits with_child = lock_tree({});
  ProcessWaits child;
  child.pid = 200;
  child.parent = 100;
  child.command = "sh -c while ...";
  child.threads.push_back(thread(200, WaitCall::kSleep, {}, true));
  with_child.processes.push_back(child);
  w = judge_wait(with_child, {}, {});
  CHECK(w.place == WaitPlace::kOutside);
  CHECK(w.phrase == "waits on its child 200 (sh -c while ...), which sleeps (a timed wait that ends by itself)");
  with_child.processes.back().threads.front() = thread(200, WaitCall::kLock);
  CHECK(judge_wait(with_child, {}, {}).place == WaitPlace::kInside);
}

TEST_CASE(
    "sockets: the job's store and its ranks are inside, another host's address is outside until a rank "
    "listens there",
    "[wait]") {
  ProcessWaits p;
  p.pid = 100;
  p.threads.push_back(thread(100, WaitCall::kDescriptors, {5}));
  p.fds[5] = tcp(5, "10.0.0.9:29500");
  p.fds[5].peers_known = false;
  TreeWaits tree;
  tree.processes.push_back(p);
  RankWait w = judge_wait(tree, {}, JobPeers{{}, {"10.0.0.9:29500"}});
  CHECK(w.place == WaitPlace::kInside);
  CHECK(w.phrase == "waits on the job's store at 10.0.0.9:29500");

  w = judge_wait(tree, {}, {});
  CHECK(w.place == WaitPlace::kOutside);
  CHECK(w.remotes == std::vector<std::string>{"10.0.0.9:29500"});
  CHECK(w.phrase == "waits on a reply from 10.0.0.9:29500");
}

TEST_CASE("waits that end by themselves or by the world are outside, what cannot be read is unknown", "[wait]") {
  const auto judge_one = [](ThreadWait t, std::map<int, FdTarget> fds = {}) {
    ProcessWaits p;
    p.pid = 100;
    p.threads.push_back(std::move(t));
    p.fds = std::move(fds);
    TreeWaits tree;
    tree.processes.push_back(std::move(p));
    return judge_wait(tree, {}, {});
  };
  CHECK(judge_one(thread(100, WaitCall::kSignal)).place == WaitPlace::kOutside);
  ThreadWait disk = thread(100, WaitCall::kOther);
  disk.state = 'D';
  CHECK_THAT(judge_one(disk).phrase, Catch::Contains("state D"));
  FdTarget tty;
  tty.fd = 0;
  tty.kind = FdKind::kTerminal;
  tty.local = "/dev/pts/3";
  CHECK(judge_one(thread(100, WaitCall::kDescriptors, {0}), {{0, tty}}).phrase ==
        "waits on input from a terminal (/dev/pts/3)");
  FdTarget gpu;
  gpu.fd = 9;
  gpu.kind = FdKind::kDevice;
  gpu.local = "/dev/nvidia0";
  CHECK(judge_one(thread(100, WaitCall::kDevice, {9}), {{9, gpu}}).place == WaitPlace::kInside);
  CHECK(judge_one(thread(100, WaitCall::kUnknown)).place == WaitPlace::kUnknown);
  CHECK(judge_one(thread(100, WaitCall::kDescriptors)).place == WaitPlace::kUnknown);  // a poll not read
  CHECK(judge_wait(TreeWaits{}, {}, {}).place == WaitPlace::kUnknown);                 // gone
}

TEST_CASE("system calls are decoded for this machine's architecture", "[wait]") {
#if defined(__x86_64__)
  const long poll = 7, read = 0, sleep = 230, futex = 202, wait4 = 61, epoll = 232;
#elif defined(__aarch64__)
  const long poll = 73, read = 63, sleep = 115, futex = 98, wait4 = 260, epoll = 22;
#endif
  const auto line = [](long nr, const std::string& args) {
    return std::to_string(nr) + " " + args + " 0x7ffd634ee328 0x7fd07cfa7503";
  };
  auto d = decode_syscall_line(line(poll, "0x7ffc10 0x1 0x927c0 0x0 0x0 0x0"));
  REQUIRE(d);
  CHECK(d->call == WaitCall::kDescriptors);
  CHECK(d->timed);  // 600 s
  CHECK(d->fds == FdSource::kPollArray);
  d = decode_syscall_line(line(poll, "0x7ffc10 0x1 0xffffffff 0x0 0x0 0x0"));  // -1: no timeout
  CHECK_FALSE(d->timed);
  CHECK(decode_syscall_line(line(poll, "0x0 0x0 0x7d0 0x0 0x0 0x0"))->call == WaitCall::kSleep);
  CHECK(decode_syscall_line(line(read, "0x4 0x7fbe31ff2930 0x1 0x0 0x0 0x0"))->args[0] == 4);
  CHECK(decode_syscall_line(line(sleep, "0x1 0x1 0x7fffed4f0610 0x0 0x0 0x0"))->call == WaitCall::kSleep);
  d = decode_syscall_line(line(futex, "0x55d0 0x189 0x0 0x0 0x0 0xffffffff"));
  CHECK(d->call == WaitCall::kLock);
  CHECK_FALSE(d->timed);
  CHECK(decode_syscall_line(line(futex, "0x55d0 0x189 0x0 0x7ffc 0x0 0xffffffff"))->timed);
  CHECK(decode_syscall_line(line(wait4, "0xffffffff 0x7ffc 0x0 0x0 0x0 0x0"))->call == WaitCall::kChild);
  CHECK(decode_syscall_line(line(epoll, "0x5 0x7ffc 0x40 0xffffffff 0x0 0x0"))->fds == FdSource::kEpoll);
  CHECK(decode_syscall_line("running\n")->call == WaitCall::kRunning);
  CHECK(decode_syscall_line("-1 0x7ffd 0x7fd0")->call == WaitCall::kOther);
  CHECK(decode_syscall_line(line(99999, "0x0 0x0 0x0 0x0 0x0 0x0"))->name == "99999");
  CHECK_FALSE(decode_syscall_line("garbage"));
}

TEST_CASE("socket tables: addresses in the kernel's byte order, both ends of a connection, descriptor links",
          "[wait]") {
  CHECK(table_address("0100007F:1F90") == "127.0.0.1:8080");
  CHECK(table_address("0000000000000000FFFF00000100007F:0050") == "127.0.0.1:80");
  CHECK(table_address("00000000000000000000000001000000:0016") == "[::1]:22");
  CHECK(table_address("nonsense") == "");
  SocketTable table;
  table.add_inet_table(
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
      "   1: 0100007F:1F90 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
      "   2: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
      "   3: 0100007F:A001 0100007F:1F91 06 00000000:00000000 00:00000000 00000000     0        0 0 1\n",
      false);
  REQUIRE(table.inet(111) != nullptr);
  CHECK(table.inet(111)->listening());
  CHECK(table.inet(111)->remote.empty());
  CHECK(table.tcp_peer(*table.inet(333)) == 222u);
  CHECK(table.tcp_peer(*table.inet(222)) == 333u);
  CHECK(table.inet(0) == nullptr);  // TIME_WAIT: no inode
  uint64_t inode = 0;
  CHECK(kind_of_link("socket:[6057]", inode) == FdKind::kOtherSocket);
  CHECK(inode == 6057);
  CHECK(kind_of_link("pipe:[6908]", inode) == FdKind::kPipe);
  CHECK(kind_of_link("/dev/pts/0", inode) == FdKind::kTerminal);
  CHECK(kind_of_link("anon_inode:[eventpoll]", inode) == FdKind::kEpoll);
  CHECK(kind_of_link("/dev/nvidia0", inode) == FdKind::kDevice);
}

TEST_CASE("waits travel with a rank's record as JSON, and are said for people", "[wait][json]") {
  RankWait w;
  w.place = WaitPlace::kOutside;
  w.phrase = "waits on a reply from 127.0.0.1:18765 (HTTP)";
  w.where = "urlopen at job.py:14";
  w.remotes = {"10.0.0.9:80"};
  w.listening = {"10.0.0.1:41000"};
  w.read = true;
  CHECK(nlohmann::json(w).get<RankWait>() == w);
  CHECK(describe(w) == "waits on a reply from 127.0.0.1:18765 (HTTP), in urlopen at job.py:14");
  const Sample s = sample("sleep_poll");
  CHECK(nlohmann::json(s.tree).get<TreeWaits>() == s.tree);
}

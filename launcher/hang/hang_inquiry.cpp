#include "launcher/hang/hang_inquiry.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/net_address.hpp"
#include "launcher/activity/proc_tree.hpp"
#include "launcher/activity/wait_probe.hpp"
#include "launcher/hang/stack_dump.hpp"
#include "launcher/workers/worker_group.hpp"

namespace meshrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
// A hook answers between two of its polls (0.1 s) unless the process holds the GIL the whole time.
constexpr std::chrono::seconds kDumpWait{3};
// Other nodes post their records right after their own dumps: allow for those and a slow store.
constexpr std::chrono::seconds kRecordsWait{10};
// Stacks take a tool run each (py-spy: under a second; gdb: more).
constexpr std::chrono::seconds kStacksWait{30};
constexpr std::chrono::seconds kStackLimit{20};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The store's addresses as sockets show them ("10.0.0.1:29500", "[fd00::1]:29500"): MASTER_ADDR may be a name.
std::set<std::string> store_endpoints(const std::string& host, int port) {
  std::set<std::string> out;
  if (host.empty() || port <= 0) return out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const std::string address = numeric_address(a->ai_addr);
    if (address.empty()) continue;
    out.insert((a->ai_family == AF_INET6 ? "[" + address + "]" : address) + ":" + std::to_string(port));
  }
  ::freeaddrinfo(found);
  return out;
}

}  // namespace

HangInquiry::HangInquiry(ProgressMonitor& progress, const ActivityMonitor& activity, WorkerGroup& group,
                         HangExchange& exchange, HangInquirySite site)
    : progress_(progress), activity_(activity), group_(group), exchange_(exchange), site_(std::move(site)) {}

Activity HangInquiry::activity(size_t lr, double window_s) const {
  // The window and the stack's motion both start when the others began waiting (a read before it, the rank's
  // start-up or its last step, would read as I/O or motion), or at the window's first sample after that.
  const auto wait_began =
      Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_s));
  const auto since = std::max(activity_.window_start(lr, wait_began), wait_began);
  return activity_.activity(lr, progress_.watch(lr).stack_motion(since), wait_began);
}

RankRecord HangInquiry::base_record(size_t lr, double window_s) const {
  const Worker& w = group_.workers()[lr];
  RankRecord r;
  r.rank = w.rank;
  r.local_rank = w.local_rank;
  r.node = site_.node;
  r.host = site_.host;
  r.pid = w.process ? w.process->pid() : 0;
  const bool running = w.process && w.process->running();
  r.state = !running ? ProcessState::kExited
                     : (process_state(r.pid) == 'T' ? ProcessState::kStopped : ProcessState::kRunning);
  r.beat_step = progress_.last_step(lr);
  if (running) r.activity = activity(lr, window_s);
  const CollectiveWatch& watch = progress_.watch(lr);
  if (!watch.hooked()) {
    r.source = RecordSource::kNoHook;
    r.source_detail =
        "meshrun's Python hook never spoke from this worker (not Python; python -I, -E or -S; "
        "or Python started by a wrapper rather than by meshrun)";
  } else if (!watch.recorder_on()) {
    r.source = RecordSource::kRecorderOff;
    r.source_detail = "TORCH_FR_BUFFER_SIZE=0 turns PyTorch's Flight Recorder off";
  } else if (r.state != ProcessState::kRunning) {
    r.source = RecordSource::kNoAnswer;
    r.source_detail = std::string("the worker is ") + std::string(to_string(r.state));
  } else {
    r.source = RecordSource::kNoAnswer;  // until its dump arrives
  }
  return r;
}

void HangInquiry::collect_dumps(std::vector<RankRecord>& records) {
  std::vector<std::string> paths(records.size());
  std::vector<bool> asked(records.size(), false);
  for (size_t lr = 0; lr < records.size(); ++lr) {
    if (records[lr].source != RecordSource::kNoAnswer || !records[lr].source_detail.empty()) continue;
    paths[lr] = group_.workers()[lr].dir + "/collectives.json";
    const std::string why_not = progress_.request_dump(lr, paths[lr]);
    asked[lr] = why_not.empty();
    if (!asked[lr]) records[lr].source_detail = why_not;
  }
  const auto deadline = Clock::now() + kDumpWait;
  for (;;) {
    progress_.drain(Clock::now());
    bool waiting = false;
    for (size_t lr = 0; lr < records.size(); ++lr) {
      if (!asked[lr]) continue;
      const auto& answer = progress_.watch(lr).dump_answer();
      if (!answer) {
        waiting = true;
        continue;
      }
      asked[lr] = false;
      if (answer->kind == proto::HookMessage::Kind::kFailed) {
        records[lr].source_detail = "the hook could not read the record: " + answer->text;
        continue;
      }
      try {
        read_hook_dump(read_file(answer->text), records[lr]);
      } catch (const ProtocolError& e) {
        records[lr].source_detail = e.what();
      }
    }
    if (!waiting) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t lr = 0; lr < records.size(); ++lr) {
    if (asked[lr]) records[lr].source_detail = "the hook did not answer within 3 s (the worker holds Python's lock)";
  }
}

std::vector<RankRecord> HangInquiry::local_records(double window_s) {
  std::vector<RankRecord> records;
  for (size_t lr = 0; lr < group_.workers().size(); ++lr) records.push_back(base_record(lr, window_s));
  collect_dumps(records);
  read_waits(records);
  return records;
}

// What each idle rank waits on (an unjudged one too: the doubt is settled by what it waits on). Busy and stopped
// ranks need no more: late and hung as they are; nor does a rank inside a collective: it waits on the job.
void HangInquiry::read_waits(std::vector<RankRecord>& records) const {
  JobPeers peers;
  peers.pids.insert(::getpid());
  for (const auto& w : group_.workers()) {
    if (!w.process || !w.process->running()) continue;
    const auto tree = read_process_tree("/proc", w.process->pid(), Clock::now());
    for (const auto& p : tree.processes) peers.pids.insert(p.pid);
  }
  peers.endpoints = store_endpoints(site_.store_host, site_.store_port);
  for (size_t lr = 0; lr < records.size(); ++lr) {
    RankRecord& r = records[lr];
    const Liveness l = r.activity.liveness;
    if (r.state != ProcessState::kRunning || r.pid <= 0 || (l != Liveness::kIdle && l != Liveness::kUnknown)) continue;
    if (progress_.watch(lr).oldest_wait()) continue;
    r.wait = judge_wait(read_tree_waits("/proc", r.pid), r.threads, peers);
    spdlog::debug("rank {} {} ({})", r.rank, describe(r.wait), to_string(r.wait.place));
  }
}

std::vector<RankRecord> HangInquiry::all_records(const std::vector<RankRecord>& mine) {
  if (site_.nodes <= 1) return mine;
  try {
    exchange_.post("records", nlohmann::json(mine));
    std::vector<RankRecord> all;
    for (const auto& [node, part] : exchange_.gather("records", Clock::now() + kRecordsWait)) {
      if (!part.is_array()) continue;
      for (const auto& r : part) all.push_back(r.get<RankRecord>());
    }
    if (!all.empty()) return all;
  } catch (const std::exception& e) {
    spdlog::warn("the hang verdict uses this node's ranks only: cannot exchange records: {}", e.what());
  }
  return mine;
}

std::vector<RankStack> HangInquiry::local_stacks() const {
  std::vector<std::future<RankStack>> pending;
  for (const auto& w : group_.workers()) {
    if (!w.process || !w.process->running()) continue;
    const pid_t pid = w.process->pid();
    const int rank = w.rank;
    const std::string exe = site_.executable;
    pending.push_back(std::async(std::launch::async, [pid, rank, exe] {
      const StackDump d = dump_stack(pid, exe, kStackLimit);
      return RankStack{rank, d.tool, d.text};
    }));
  }
  std::vector<RankStack> out;
  for (auto& p : pending) out.push_back(p.get());
  for (const auto& s : out) {
    const auto& workers = group_.workers();
    const auto it = std::find_if(workers.begin(), workers.end(), [&](const Worker& w) { return w.rank == s.rank; });
    if (it != workers.end()) std::ofstream(it->dir + "/stack.txt") << s.text;
  }
  return out;
}

std::vector<RankStack> HangInquiry::all_stacks(const std::vector<RankStack>& mine) {
  if (site_.nodes <= 1) return mine;
  try {
    nlohmann::json part = nlohmann::json::array();
    for (const auto& s : mine) part.push_back({{"rank", s.rank}, {"tool", s.tool}, {"text", s.text}});
    exchange_.post("stacks", part);
    std::vector<RankStack> all;
    for (const auto& [node, got] : exchange_.gather("stacks", Clock::now() + kStacksWait)) {
      if (!got.is_array()) continue;
      for (const auto& s : got) all.push_back(RankStack{s.value("rank", -1), s.value("tool", ""), s.value("text", "")});
    }
    return all;
  } catch (const std::exception& e) {
    spdlog::warn("only this node's stacks: cannot exchange them: {}", e.what());
    return mine;
  }
}

HangVerdict HangInquiry::judge(const std::optional<FallbackSuspect>& suspect, const LatenessRule& lateness) {
  auto records = all_records(local_records(lateness.waited_s));
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  HangVerdict verdict = judge_hang(records, suspect, lateness);
  std::ofstream(verdict_file(verdict.outcome))
      << nlohmann::json{{"verdict", verdict}, {"ranks", records}}.dump(2) << "\n";
  return verdict;
}

std::vector<RankStack> HangInquiry::stacks() {
  auto out = all_stacks(local_stacks());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace meshrun::launcher

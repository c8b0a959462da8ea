#include "launcher/activity/wait_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "launcher/activity/proc_tree.hpp"
#include "launcher/activity/scheduler_clock.hpp"
#include "launcher/activity/socket_table.hpp"
#include "launcher/activity/wait_call.hpp"

namespace meshrun::launcher {
namespace {

namespace fs = std::filesystem;

// Bounds: a fork bomb or a process with a million descriptors must not make an inquiry read /proc for seconds.
constexpr size_t kMaxProcesses = 256;
constexpr size_t kMaxThreads = 512;
constexpr uint64_t kMaxPollFds = 256;
constexpr uint64_t kMaxSelectFds = 1024;
constexpr size_t kMaxScannedProcesses = 8192;
constexpr size_t kMaxListening = 16;

std::string link_text(const std::string& path) {
  std::error_code ec;
  const auto target = fs::read_symlink(path, ec);
  return ec ? std::string() : target.string();
}

std::string dir_of(const std::string& proc_root, pid_t pid) { return proc_root + "/" + std::to_string(pid); }

bool numeric(const std::string& name) {
  return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

std::vector<int> numeric_entries(const std::string& dir, size_t max) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!numeric(name)) continue;
    out.push_back(std::stoi(name));
    if (out.size() >= max) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The fields of a stat file after "(comm)", and the comm itself.
struct StatLine {
  std::string comm;
  char state = '\0';
  pid_t parent = 0;
};
StatLine read_stat(const std::string& path) {
  const std::string text = read_proc_file(path);
  StatLine s;
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > text.size()) return s;
  s.comm = text.substr(open + 1, close - open - 1);
  s.state = text[close + 2];
  std::istringstream rest(text.substr(close + 4));
  long parent = 0;
  rest >> parent;
  s.parent = static_cast<pid_t>(parent);
  return s;
}

// Reads `size` bytes of a live process's memory at `address` (the agent is the worker's parent: allowed).
bool read_memory(pid_t pid, uint64_t address, void* out, size_t size) {
  UniqueFd mem(::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (!mem.valid()) return false;
  return ::pread(mem.get(), out, size, static_cast<off_t>(address)) == static_cast<ssize_t>(size);
}

std::vector<int> poll_fds(pid_t pid, const DecodedCall& d) {
  const uint64_t n = std::min(d.args[1], kMaxPollFds);
  std::vector<pollfd> fds(n);
  if (n == 0 || !read_memory(pid, d.args[0], fds.data(), n * sizeof(pollfd))) return {};
  std::vector<int> out;
  for (const auto& p : fds) {
    if (p.fd >= 0) out.push_back(p.fd);
  }
  return out;
}

std::vector<int> select_fds(pid_t pid, const DecodedCall& d) {
  const uint64_t n = std::min(d.args[0], kMaxSelectFds);
  const size_t words = (n + 63) / 64;
  std::set<int> out;
  for (const uint64_t set : {d.args[1], d.args[2]}) {
    if (set == 0 || words == 0) continue;
    std::vector<uint64_t> bits(words);
    if (!read_memory(pid, set, bits.data(), words * sizeof(uint64_t))) continue;
    for (uint64_t fd = 0; fd < n; ++fd) {
      if ((bits[fd / 64] >> (fd % 64)) & 1U) out.insert(static_cast<int>(fd));
    }
  }
  return {out.begin(), out.end()};
}

// "tfd:        5 events:       19 data: ..." lines of an epoll's fdinfo.
std::vector<int> epoll_targets(const std::string& fdinfo) {
  std::vector<int> out;
  std::istringstream in(fdinfo);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("tfd:")) continue;
    std::istringstream fields(line.substr(4));
    int fd = -1;
    if (fields >> fd && fd >= 0) out.push_back(fd);
  }
  return out;
}

// The access mode of a descriptor from its fdinfo's "flags:" (octal): 1 write-only, 2 read-write.
bool opened_for_writing(const std::string& fdinfo) {
  const auto at = fdinfo.find("flags:");
  if (at == std::string::npos) return false;
  std::istringstream in(fdinfo.substr(at + 6, 30));
  std::string octal;
  in >> octal;
  unsigned flags = 0;
  std::from_chars(octal.data(), octal.data() + octal.size(), flags, 8);
  return (flags & O_ACCMODE) != O_RDONLY;
}

ThreadWait read_thread_once(const std::string& proc_root, pid_t pid, pid_t tid, SchedulerClock& clock,
                            DecodedCall& decoded) {
  const std::string task = dir_of(proc_root, pid) + "/task/" + std::to_string(tid);
  ThreadWait t;
  t.tid = tid;
  const StatLine stat = read_stat(task + "/stat");
  t.name = stat.comm;
  t.state = stat.state;
  t.idle_s = clock.idle_seconds(task);
  const auto d = decode_syscall_line(read_proc_file(task + "/syscall"));
  if (!d) return t;  // kUnknown: unreadable
  decoded = *d;
  t.call = d->call;
  t.syscall = d->name;
  t.timed = d->timed;
  t.writing = d->writing;
  if (t.state == 'R') t.call = WaitCall::kRunning;
  t.child = static_cast<pid_t>(d->child);
  return t;
}

// A thread caught runnable may only be on its way back into its wait (a network thread handling its peers' bytes
// sits in the run queue a while on a loaded machine): live, it is looked at again a few times, and it runs only
// when it stays runnable. Without this, one unlucky look turns a deadlock's proof into "unknown".
constexpr int kRunnableLooks = 5;
constexpr std::chrono::milliseconds kRunnableLookEvery{2};

ThreadWait read_thread(const std::string& proc_root, bool live, pid_t pid, pid_t tid, SchedulerClock& clock,
                       DecodedCall& decoded) {
  ThreadWait t = read_thread_once(proc_root, pid, tid, clock, decoded);
  for (int look = 1; live && t.call == WaitCall::kRunning && look < kRunnableLooks; ++look) {
    std::this_thread::sleep_for(kRunnableLookEvery);
    t = read_thread_once(proc_root, pid, tid, clock, decoded);
  }
  return t;
}

// The descriptors a thread waits on, from its call's arguments (and, live, the memory they point to).
std::vector<int> waited_fds(bool live, pid_t pid, const DecodedCall& d) {
  switch (d.fds) {
    case FdSource::kFirstArgument: return {static_cast<int>(static_cast<uint32_t>(d.args[0]))};
    case FdSource::kPollArray: return live ? poll_fds(pid, d) : std::vector<int>{};
    case FdSource::kSelectSets: return live ? select_fds(pid, d) : std::vector<int>{};
    case FdSource::kEpoll: return {static_cast<int>(static_cast<uint32_t>(d.args[0]))};  // its targets follow
    case FdSource::kNone: break;
  }
  return {};
}

class Reader {
 public:
  Reader(std::string proc_root, pid_t leader)
      : root_(std::move(proc_root)), live_(root_ == "/proc"), sockets_(SocketTable::read(root_, leader, live_)) {}

  TreeWaits read(pid_t leader) {
    TreeWaits tree;
    tree.read_at_unix_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    SchedulerClock clock(root_);
    for (const auto& p : read_process_tree(root_, leader, std::chrono::steady_clock::now()).processes) {
      if (tree.processes.size() >= kMaxProcesses) break;
      tree.processes.push_back(read_process(p.pid, clock));
    }
    find_holders(tree);
    return tree;
  }

 private:
  ProcessWaits read_process(pid_t pid, SchedulerClock& clock) {
    ProcessWaits p;
    p.pid = pid;
    p.parent = read_stat(dir_of(root_, pid) + "/stat").parent;
    p.command = short_command(root_, pid);
    std::vector<int> tids = numeric_entries(dir_of(root_, pid) + "/task", kMaxThreads);
    std::stable_partition(tids.begin(), tids.end(), [pid](int tid) { return tid == pid; });
    for (int tid : tids) {
      DecodedCall d;
      ThreadWait t = read_thread(root_, live_, pid, tid, clock, d);
      if (t.call == WaitCall::kDescriptors || t.call == WaitCall::kFileLock || t.call == WaitCall::kDevice) {
        t.fds = waited_fds(live_, pid, d);
        for (int fd : t.fds) add_fd(p, fd);
      }
      p.threads.push_back(std::move(t));
    }
    read_listening(p);
    return p;
  }

  void add_fd(ProcessWaits& p, int fd) {
    if (p.fds.count(fd) > 0) return;
    FdTarget t = describe_fd(p.pid, fd);
    const std::vector<int> targets = t.targets;
    p.fds[fd] = std::move(t);
    for (int target : targets) {
      if (target != fd) add_fd(p, target);
    }
  }

  FdTarget describe_fd(pid_t pid, int fd) {
    FdTarget t;
    t.fd = fd;
    const std::string path = dir_of(root_, pid) + "/fd/" + std::to_string(fd);
    const std::string link = link_text(path);
    t.kind = kind_of_link(link, t.inode);
    switch (t.kind) {
      case FdKind::kOtherSocket: describe_socket(t); break;
      case FdKind::kPipe: pipe_inodes_.insert(t.inode); break;
      case FdKind::kEpoll:
        t.targets = epoll_targets(read_proc_file(dir_of(root_, pid) + "/fdinfo/" + std::to_string(fd)));
        break;
      case FdKind::kFile: {
        t.local = link;
        struct stat st {};
        if (live_ && ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)) {
          t.kind = FdKind::kFifo;
          t.inode = st.st_ino;
          pipe_inodes_.insert(t.inode);
          fifo_paths_[t.inode] = link;
        }
        break;
      }
      case FdKind::kTerminal:
      case FdKind::kDevice: t.local = link; break;
      default: break;
    }
    return t;
  }

  void describe_socket(FdTarget& t) {
    if (const InetSocket* s = sockets_.inet(t.inode)) {
      t.kind = s->udp ? FdKind::kUdp : s->listening() ? FdKind::kTcpListen : FdKind::kTcp;
      t.local = s->local;
      t.remote = s->remote;
      t.connecting = s->connecting();
      if (const auto peer = sockets_.tcp_peer(*s)) peer_inodes_.emplace(*peer, t.inode);
      return;
    }
    if (sockets_.is_unix(t.inode)) {
      t.kind = FdKind::kUnix;
      t.local = sockets_.unix_path(t.inode);
      if (const auto peer = sockets_.unix_peer(t.inode)) peer_inodes_.emplace(*peer, t.inode);
    }
  }

  void read_listening(ProcessWaits& p) {
    for (int fd : numeric_entries(dir_of(root_, p.pid) + "/fd", 4096)) {
      uint64_t inode = 0;
      if (kind_of_link(link_text(dir_of(root_, p.pid) + "/fd/" + std::to_string(fd)), inode) != FdKind::kOtherSocket)
        continue;
      const InetSocket* s = sockets_.inet(inode);
      if (s == nullptr || !s->listening()) continue;
      p.listening.push_back(s->local);
      if (p.listening.size() >= kMaxListening) return;
    }
  }

  // One pass over every process's descriptors: who holds the other end of each socket, and each pipe.
  void find_holders(TreeWaits& tree) {
    if (pipe_inodes_.empty() && peer_inodes_.empty()) return;
    std::map<uint64_t, std::vector<FdHolder>> holders;  // by the inode held
    const std::vector<int> pids = numeric_entries(root_, kMaxScannedProcesses);
    for (int pid : pids) {
      const std::string fd_dir = dir_of(root_, pid) + "/fd";
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(fd_dir, ec)) {
        const std::string link = link_text(e.path().string());
        uint64_t inode = 0;
        const FdKind kind = kind_of_link(link, inode);
        if (kind == FdKind::kFile && !fifo_paths_.empty()) {
          for (const auto& [fifo_inode, fifo_path] : fifo_paths_) {
            if (link == fifo_path) inode = fifo_inode;
          }
        }
        if (inode == 0 || (pipe_inodes_.count(inode) == 0 && peer_inodes_.count(inode) == 0)) continue;
        const std::string info = read_proc_file(dir_of(root_, pid) + "/fdinfo/" + e.path().filename().string());
        auto& list = holders[inode];
        const bool writes = opened_for_writing(info);
        const auto same = std::find_if(list.begin(), list.end(), [pid](const FdHolder& h) { return h.pid == pid; });
        if (same != list.end()) {
          same->writes = same->writes || writes;
        } else {
          list.push_back(FdHolder{static_cast<pid_t>(pid), writes, short_command(root_, static_cast<pid_t>(pid))});
        }
      }
    }
    for (auto& p : tree.processes) {
      for (auto& [fd, t] : p.fds) fill_peers(p.pid, t, holders);
    }
  }

  void fill_peers(pid_t self, FdTarget& t, const std::map<uint64_t, std::vector<FdHolder>>& holders) {
    const auto add_all = [&](uint64_t inode, bool skip_self) {
      t.peers_known = true;
      const auto it = holders.find(inode);
      if (it == holders.end()) return;
      for (const auto& h : it->second) {
        if (!(skip_self && h.pid == self)) t.peers.push_back(h);
      }
    };
    if (t.kind == FdKind::kPipe || t.kind == FdKind::kFifo) {
      add_all(t.inode, false);  // the same pipe: this process's own other end counts (a pipe to itself)
      return;
    }
    for (const auto& [peer, mine] : peer_inodes_) {
      if (mine == t.inode) add_all(peer, false);
    }
  }

  std::string root_;
  bool live_;
  SocketTable sockets_;
  std::set<uint64_t> pipe_inodes_;            // pipes and FIFOs waited on: their holders are looked for
  std::map<uint64_t, uint64_t> peer_inodes_;  // the other end's inode -> ours
  std::map<uint64_t, std::string> fifo_paths_;
};

}  // namespace

std::string_view to_string(WaitCall value) {
  switch (value) {
    case WaitCall::kRunning: return "running";
    case WaitCall::kSleep: return "sleep";
    case WaitCall::kDescriptors: return "descriptors";
    case WaitCall::kChild: return "child";
    case WaitCall::kLock: return "lock";
    case WaitCall::kSignal: return "signal";
    case WaitCall::kFileLock: return "file_lock";
    case WaitCall::kDevice: return "device";
    case WaitCall::kOther: return "other";
    case WaitCall::kUnknown: break;
  }
  return "unknown";
}

std::string_view to_string(FdKind value) {
  switch (value) {
    case FdKind::kTcp: return "tcp";
    case FdKind::kTcpListen: return "tcp_listen";
    case FdKind::kUdp: return "udp";
    case FdKind::kUnix: return "unix";
    case FdKind::kOtherSocket: return "socket";
    case FdKind::kPipe: return "pipe";
    case FdKind::kFifo: return "fifo";
    case FdKind::kTerminal: return "terminal";
    case FdKind::kDevice: return "device";
    case FdKind::kFile: return "file";
    case FdKind::kEventFd: return "eventfd";
    case FdKind::kTimerFd: return "timerfd";
    case FdKind::kSignalFd: return "signalfd";
    case FdKind::kInotify: return "inotify";
    case FdKind::kEpoll: return "epoll";
    case FdKind::kOther: break;
  }
  return "other";
}

FdKind kind_of_link(const std::string& link, uint64_t& inode) {
  inode = 0;
  const auto bracketed = [&](std::string_view prefix) {
    if (!link.starts_with(prefix) || link.back() != ']') return false;
    const std::string_view digits(link.data() + prefix.size(), link.size() - prefix.size() - 1);
    std::from_chars(digits.data(), digits.data() + digits.size(), inode);
    return true;
  };
  if (link.empty()) return FdKind::kOther;
  if (bracketed("socket:[")) return FdKind::kOtherSocket;  // refined by the socket tables
  if (bracketed("pipe:[")) return FdKind::kPipe;
  if (link == "anon_inode:[eventfd]") return FdKind::kEventFd;
  if (link == "anon_inode:[timerfd]") return FdKind::kTimerFd;
  if (link == "anon_inode:[signalfd]") return FdKind::kSignalFd;
  if (link == "anon_inode:inotify") return FdKind::kInotify;
  if (link == "anon_inode:[eventpoll]") return FdKind::kEpoll;
  if (link.starts_with("/dev/pts/") || link.starts_with("/dev/tty") || link == "/dev/console") return FdKind::kTerminal;
  if (link.starts_with("/dev/")) return FdKind::kDevice;
  if (link.starts_with("/")) return FdKind::kFile;
  return FdKind::kOther;
}

std::string short_command(const std::string& proc_root, pid_t pid, size_t max) {
  // The program's and an absolute path's last component: "python outside_world.py service port 90", not the
  // folders of a venv.
  const std::string raw = read_proc_file(dir_of(proc_root, pid) + "/cmdline");
  std::string text;
  for (size_t at = 0; at < raw.size();) {
    const size_t end = std::min(raw.find('\0', at), raw.size());
    std::string arg = raw.substr(at, end - at);
    at = end + 1;
    if (arg.empty()) continue;
    const bool path = (text.empty() || arg.front() == '/') && arg.back() != '/' && arg.find(' ') == std::string::npos;
    if (path) arg = arg.substr(arg.rfind('/') + 1);
    std::replace_if(
        arg.begin(), arg.end(), [](char c) { return c == '\n' || c == '\t' || c == '\r'; }, ' ');
    text += (text.empty() ? "" : " ") + arg;
  }
  if (text.empty()) text = read_stat(dir_of(proc_root, pid) + "/stat").comm;
  if (text.size() > max) text = text.substr(0, max - 3) + "...";
  return text;
}

TreeWaits read_tree_waits(const std::string& proc_root, pid_t leader) {
  if (leader <= 0) return {};
  return Reader(proc_root, leader).read(leader);
}

void to_json(nlohmann::json& j, const FdHolder& h) {
  j = {{"pid", h.pid}, {"writes", h.writes}, {"command", h.command}};
}
void from_json(const nlohmann::json& j, FdHolder& h) {
  h.pid = j.value("pid", 0);
  h.writes = j.value("writes", false);
  h.command = j.value("command", "");
}

namespace {
template <typename Enum, size_t N>
Enum enum_from(const std::string& text, const Enum (&values)[N], Enum fallback) {
  for (Enum v : values) {
    if (to_string(v) == text) return v;
  }
  return fallback;
}
constexpr FdKind kFdKinds[] = {FdKind::kTcp,         FdKind::kTcpListen, FdKind::kUdp,     FdKind::kUnix,
                               FdKind::kOtherSocket, FdKind::kPipe,      FdKind::kFifo,    FdKind::kTerminal,
                               FdKind::kDevice,      FdKind::kFile,      FdKind::kEventFd, FdKind::kTimerFd,
                               FdKind::kSignalFd,    FdKind::kInotify,   FdKind::kEpoll,   FdKind::kOther};
constexpr WaitCall kWaitCalls[] = {WaitCall::kRunning, WaitCall::kSleep,  WaitCall::kDescriptors, WaitCall::kChild,
                                   WaitCall::kLock,    WaitCall::kSignal, WaitCall::kFileLock,    WaitCall::kDevice,
                                   WaitCall::kOther,   WaitCall::kUnknown};
}  // namespace

void to_json(nlohmann::json& j, const FdTarget& t) {
  j = {{"fd", t.fd},       {"kind", to_string(t.kind)},    {"inode", t.inode},
       {"local", t.local}, {"remote", t.remote},           {"connecting", t.connecting},
       {"peers", t.peers}, {"peers_known", t.peers_known}, {"targets", t.targets}};
}
void from_json(const nlohmann::json& j, FdTarget& t) {
  t.fd = j.value("fd", -1);
  t.kind = enum_from(j.value("kind", "other"), kFdKinds, FdKind::kOther);
  t.inode = j.value("inode", uint64_t{0});
  t.local = j.value("local", "");
  t.remote = j.value("remote", "");
  t.connecting = j.value("connecting", false);
  t.peers = j.value("peers", std::vector<FdHolder>{});
  t.peers_known = j.value("peers_known", false);
  t.targets = j.value("targets", std::vector<int>{});
}

void to_json(nlohmann::json& j, const ThreadWait& t) {
  j = {{"tid", t.tid},
       {"name", t.name},
       {"state", std::string(t.state ? 1 : 0, t.state)},
       {"call", to_string(t.call)},
       {"syscall", t.syscall},
       {"timed", t.timed},
       {"writing", t.writing},
       {"fds", t.fds},
       {"child", t.child},
       {"idle_s", t.idle_s}};
}
void from_json(const nlohmann::json& j, ThreadWait& t) {
  t.tid = j.value("tid", 0);
  t.name = j.value("name", "");
  const std::string state = j.value("state", "");
  t.state = state.empty() ? '\0' : state[0];
  t.call = enum_from(j.value("call", "unknown"), kWaitCalls, WaitCall::kUnknown);
  t.syscall = j.value("syscall", "");
  t.timed = j.value("timed", false);
  t.writing = j.value("writing", false);
  t.fds = j.value("fds", std::vector<int>{});
  t.child = j.value("child", -1);
  t.idle_s = j.value("idle_s", -1.0);
}

void to_json(nlohmann::json& j, const ProcessWaits& p) {
  nlohmann::json fds = nlohmann::json::array();
  for (const auto& [fd, t] : p.fds) fds.push_back(t);
  j = {{"pid", p.pid},         {"parent", p.parent}, {"command", p.command},
       {"threads", p.threads}, {"fds", fds},         {"listening", p.listening}};
}
void from_json(const nlohmann::json& j, ProcessWaits& p) {
  p.pid = j.value("pid", 0);
  p.parent = j.value("parent", 0);
  p.command = j.value("command", "");
  p.threads = j.value("threads", std::vector<ThreadWait>{});
  p.fds.clear();
  for (const auto& t : j.value("fds", nlohmann::json::array())) {
    auto target = t.get<FdTarget>();
    p.fds[target.fd] = std::move(target);
  }
  p.listening = j.value("listening", std::vector<std::string>{});
}

void to_json(nlohmann::json& j, const TreeWaits& t) {
  j = {{"processes", t.processes}, {"read_at_unix_ms", t.read_at_unix_ms}};
}
void from_json(const nlohmann::json& j, TreeWaits& t) {
  t.processes = j.value("processes", std::vector<ProcessWaits>{});
  t.read_at_unix_ms = j.value("read_at_unix_ms", int64_t{0});
}

}  // namespace meshrun::launcher

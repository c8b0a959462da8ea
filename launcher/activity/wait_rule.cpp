#include "launcher/activity/wait_rule.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/clock_text.hpp"

namespace meshrun::launcher {
namespace {

// What one wait leads to. Outside wins over unknown, unknown over inside: a wait is proof of a hang only
// when every way out of it leads back into the job.
struct Finding {
  WaitPlace place = WaitPlace::kInside;
  std::string phrase;                // for outside and unknown: what it waits on
  std::vector<std::string> remotes;  // outside because of these addresses alone
  bool counted = true;               // false: a native thread's wait that says nothing either way
};

int rank_of(WaitPlace p) { return p == WaitPlace::kOutside ? 2 : p == WaitPlace::kUnknown ? 1 : 0; }

Finding inside(std::string phrase = "") { return Finding{WaitPlace::kInside, std::move(phrase), {}, true}; }
Finding ignored() {
  Finding f;
  f.counted = false;
  return f;
}
Finding outside(std::string phrase, std::vector<std::string> remotes = {}) {
  return Finding{WaitPlace::kOutside, std::move(phrase), std::move(remotes), true};
}
Finding unknown(std::string phrase) { return Finding{WaitPlace::kUnknown, std::move(phrase), {}, true}; }

// Keeps the weightier of the two; of two outside findings, the first's words, both's addresses (the wait rests on
// addresses alone only when every outside way does).
void merge(Finding& into, const Finding& f) {
  if (!f.counted) return;
  if (!into.counted) {
    into = f;
    return;
  }
  if (rank_of(f.place) > rank_of(into.place)) {
    into = f;
  } else if (f.place == WaitPlace::kInside && into.place == WaitPlace::kInside && into.phrase.empty()) {
    into.phrase = f.phrase;
  } else if (f.place == WaitPlace::kOutside && into.place == WaitPlace::kOutside) {
    if (f.remotes.empty() || into.remotes.empty()) {
      into.remotes.clear();
    } else {
      into.remotes.insert(into.remotes.end(), f.remotes.begin(), f.remotes.end());
    }
  }
}

// A protocol named from the Python frames of the thread that waits on the socket.
std::string protocol_hint(const PythonThread* thread) {
  if (thread == nullptr) return "";
  static constexpr std::pair<std::string_view, std::string_view> kHints[] = {
      {"/http/client.py", "HTTP"}, {"/urllib3/", "HTTP"}, {"/requests/", "HTTP"},  {"/httpx/", "HTTP"},
      {"/aiohttp/", "HTTP"},       {"/grpc/", "gRPC"},    {"/smtplib.py", "SMTP"}, {"/ftplib.py", "FTP"},
      {"/redis/", "Redis"},        {"/ssl.py", "TLS"},
  };
  for (const auto& [needle, name] : kHints) {
    for (const auto& f : thread->frames) {
      if (f.find(needle) != std::string::npos) return std::string(name);
    }
  }
  return "";
}

std::string with_hint(const std::string& text, const std::string& hint) {
  return hint.empty() ? text : text + " (" + hint + ")";
}

std::string holder_text(const FdHolder& h) { return fmt::format("pid {} ({})", h.pid, h.command); }

bool is_gpu(const std::string& path) { return path.starts_with("/dev/nvidia") || path.starts_with("/dev/dri/"); }

class Judge {
 public:
  Judge(const TreeWaits& tree, const std::vector<PythonThread>& python, const JobPeers& peers)
      : tree_(tree), peers_(peers) {
    for (const auto& p : tree.processes) processes_[p.pid] = &p;
    for (const auto& t : python) python_[static_cast<pid_t>(t.tid)] = &t;
  }

  // The worker's main thread, judged in full, with the rest of its tree as it leads there.
  Finding main_wait() {
    const ProcessWaits& leader = tree_.processes.front();
    if (leader.threads.empty()) return unknown("waits on something meshrun could not read (no thread of it was read)");
    return process_wait(leader, /*nested=*/false);
  }

 private:
  enum class Mode { kFull, kNative };

  bool in_tree(pid_t pid) const { return processes_.count(pid) > 0; }
  const PythonThread* python(pid_t tid) const {
    const auto it = python_.find(tid);
    return it == python_.end() ? nullptr : it->second;
  }
  // The leader's Python threads are known by name; a thread of any other process is native.
  Mode mode_of(const ProcessWaits& p, const ThreadWait& t) const {
    return &p == &tree_.processes.front() && python(t.tid) != nullptr ? Mode::kFull : Mode::kNative;
  }

  Finding process_wait(const ProcessWaits& p, bool nested) {
    Finding f = thread_wait(p, p.threads.front(), Mode::kFull);
    // A child's other threads count as native ones; the leader's are looked at only when its main thread waits
    // on them (a lock, an eventfd, a pipe to itself: others_wait).
    if (nested) {
      for (size_t i = 1; i < p.threads.size(); ++i) merge(f, thread_wait(p, p.threads[i], Mode::kNative));
    }
    return f;
  }

  // Whether any thread but `except`, or any child, of `p` can end the wait: each judged as it waits.
  Finding others_wait(const ProcessWaits& p, pid_t except) {
    Finding f = inside();
    for (const auto& t : p.threads) {
      if (t.tid == except) continue;
      const PythonThread* py = python(t.tid);
      if (py != nullptr && py->meshrun) continue;
      const Mode mode = mode_of(p, t);
      // A thread that itself waits on a lock cannot release one: no need to follow it back here.
      if (t.call == WaitCall::kLock) continue;
      Finding g = thread_wait(p, t, mode);
      if (g.counted && g.place != WaitPlace::kInside) {
        const std::string who = py != nullptr ? fmt::format("its thread '{}' ({})", py->name, t.tid)
                                              : fmt::format("its thread {} ({})", t.tid, t.name);
        g.phrase = fmt::format("waits on {}, which {}{}", who, g.phrase,
                               py != nullptr && !py->where.empty() ? " in " + py->where : "");
      }
      merge(f, g);
    }
    for (const auto& c : tree_.processes) {
      if (c.parent != p.pid || c.pid == p.pid) continue;
      merge(f, child_wait(c, "its child"));
    }
    return f;
  }

  Finding child_wait(const ProcessWaits& c, const std::string& who) {
    Finding g = process_wait(c, /*nested=*/true);
    if (g.counted && g.place != WaitPlace::kInside) {
      g.phrase = fmt::format("waits on {} {} ({}), which {}", who, c.pid, c.command, g.phrase);
    }
    return g;
  }

  Finding thread_wait(const ProcessWaits& p, const ThreadWait& t, Mode mode) {
    const auto key = std::make_pair(p.pid, t.tid);
    if (std::find(path_.begin(), path_.end(), key) != path_.end())
      return inside("waits in a cycle of waits inside its tree");
    path_.push_back(key);
    Finding f = thread_wait_once(p, t, mode);
    path_.pop_back();
    return f;
  }

  Finding thread_wait_once(const ProcessWaits& p, const ThreadWait& t, Mode mode) {
    const bool full = mode == Mode::kFull;
    if (t.state == 'Z' || t.state == 'X') return ignored();
    if (t.state == 'D') return outside("is in an uninterruptible wait (state D: a disk or a network file system)");
    if (t.state == 'T' || t.state == 't') return unknown("is stopped by a signal");
    switch (t.call) {
      case WaitCall::kRunning: return unknown("runs");
      case WaitCall::kSleep: return full ? outside("sleeps (a timed wait that ends by itself)") : ignored();
      case WaitCall::kDescriptors: return descriptors_wait(p, t, mode);
      case WaitCall::kChild: return full ? children_wait(p, t) : ignored();
      case WaitCall::kLock: return full ? lock_wait(p, t) : ignored();
      case WaitCall::kSignal: return full ? outside("waits for a signal") : ignored();
      case WaitCall::kFileLock: {
        if (!full) return ignored();
        const auto it = t.fds.empty() ? p.fds.end() : p.fds.find(t.fds.front());
        return outside(it != p.fds.end() && !it->second.local.empty() ? "waits on a lock on " + it->second.local
                                                                      : "waits on a lock on a file");
      }
      case WaitCall::kDevice: {
        const auto it = t.fds.empty() ? p.fds.end() : p.fds.find(t.fds.front());
        if (it != p.fds.end() && is_gpu(it->second.local))
          return inside("waits on the GPU's driver (" + it->second.local + ")");
        return full ? unknown("waits on a device" + (it != p.fds.end() ? " (" + it->second.local + ")" : std::string()))
                    : ignored();
      }
      case WaitCall::kOther:
        return full ? unknown("waits in a call meshrun does not classify (" + t.syscall + ")") : ignored();
      case WaitCall::kUnknown: break;
    }
    return full ? unknown("waits on something meshrun could not read") : ignored();
  }

  Finding lock_wait(const ProcessWaits& p, const ThreadWait& t) {
    Finding f = others_wait(p, t.tid);
    if (f.place == WaitPlace::kInside) {
      f.phrase =
          "waits on a lock, an event or a queue that nothing else in its tree can release (its other threads "
          "and processes wait on locks or on the job itself)";
    }
    return f;
  }

  Finding children_wait(const ProcessWaits& p, const ThreadWait& t) {
    Finding f = ignored();
    for (const auto& c : tree_.processes) {
      if (c.parent != p.pid || c.pid == p.pid || (t.child > 0 && c.pid != t.child)) continue;
      merge(f, child_wait(c, "its child"));
    }
    if (!f.counted) return unknown("waits for a child process that meshrun could not read");
    return f;
  }

  Finding descriptors_wait(const ProcessWaits& p, const ThreadWait& t, Mode mode) {
    if (t.fds.empty()) return mode == Mode::kFull ? unknown("waits on descriptors meshrun could not read") : ignored();
    Finding f = ignored();
    for (int fd : t.fds) merge(f, fd_wait(p, t, fd, mode, 0));
    if (!f.counted) return mode == Mode::kFull ? inside("waits on meshrun's own sockets") : ignored();
    return f;
  }

  Finding fd_wait(const ProcessWaits& p, const ThreadWait& t, int fd, Mode mode, int depth) {
    const bool full = mode == Mode::kFull;
    const auto it = p.fds.find(fd);
    if (it == p.fds.end())
      return full ? unknown(fmt::format("waits on descriptor {}, which meshrun could not read", fd)) : ignored();
    const FdTarget& target = it->second;
    switch (target.kind) {
      case FdKind::kTcp: return tcp_wait(p, t, target, mode);
      case FdKind::kTcpListen: return full ? outside("waits for connections on " + target.local) : ignored();
      case FdKind::kUdp:
        return full ? outside("waits on a datagram on " + target.local +
                              (target.remote.empty() ? std::string() : " from " + target.remote))
                    : ignored();
      case FdKind::kUnix: return unix_wait(p, t, target, mode);
      case FdKind::kPipe:
      case FdKind::kFifo: return pipe_wait(p, t, target, mode);
      case FdKind::kTerminal: return outside("waits on input from a terminal (" + target.local + ")");
      case FdKind::kEventFd: return full ? own_wait(p, t, "an eventfd") : ignored();
      case FdKind::kTimerFd: return full ? outside("waits on a timer (it ends by itself)") : ignored();
      case FdKind::kSignalFd: return full ? outside("waits for a signal") : ignored();
      case FdKind::kInotify: return full ? outside("waits for changes to files (inotify)") : ignored();
      case FdKind::kEpoll: {
        if (depth > 2 || target.targets.empty())
          return full ? unknown("waits on an epoll set meshrun could not read") : ignored();
        Finding f = ignored();
        for (int inner : target.targets) merge(f, fd_wait(p, t, inner, mode, depth + 1));
        return f.counted || !full ? f : inside("waits on meshrun's own sockets");
      }
      case FdKind::kDevice:
        if (is_gpu(target.local)) return inside("waits on the GPU's driver (" + target.local + ")");
        return full ? unknown("waits on a device (" + target.local + ")") : ignored();
      case FdKind::kFile: return full ? unknown("waits on a file (" + target.local + ")") : ignored();
      case FdKind::kOtherSocket:
      case FdKind::kOther: break;
    }
    return full ? unknown(fmt::format("waits on descriptor {} ({})", fd, to_string(target.kind))) : ignored();
  }

  Finding tcp_wait(const ProcessWaits& p, const ThreadWait& t, const FdTarget& target, Mode mode) {
    const std::string hint = protocol_hint(python(t.tid));
    if (target.connecting) return outside(with_hint("waits to connect to " + target.remote, hint), {target.remote});
    const std::string what = t.writing ? "waits to send to " + target.remote : "waits on a reply from " + target.remote;
    Finding f = ignored();
    for (const auto& h : target.peers) {
      if (h.pid == p.pid) {
        merge(f, mode == Mode::kFull ? own_wait(p, t, "a socket to its own process") : ignored());
      } else if (in_tree(h.pid)) {
        merge(f, serving_process(h.pid));
      } else if (peers_.pids.count(h.pid) > 0) {
        merge(f, inside(fmt::format("waits on {} ({}), a process of the job", target.remote, holder_text(h))));
      } else {
        merge(f, outside(with_hint(what, hint) + " (" + holder_text(h) + ")"));
      }
    }
    if (f.counted) return f;
    if (peers_.endpoints.count(target.remote) > 0) return inside("waits on the job's store at " + target.remote);
    // Another host's address: a service, or a rank whose socket the judge may recognise (RankWait::remotes). A
    // native thread's socket to another host is its library's (Gloo's pairs): it says nothing either way.
    if (mode == Mode::kNative) return ignored();
    return outside(with_hint(what, hint), {target.remote});
  }

  // A wait that only another thread of the same process (or a child) can end: an eventfd, a socket or pipe to itself.
  Finding own_wait(const ProcessWaits& p, const ThreadWait& t, const std::string& what) {
    Finding f = others_wait(p, t.tid);
    if (f.place == WaitPlace::kInside) {
      f.phrase = "waits on " + what +
                 " that only its own process can serve, and nothing else in its tree can (its "
                 "other threads and processes wait on locks or on the job itself)";
    }
    return f;
  }

  Finding unix_wait(const ProcessWaits& p, const ThreadWait& t, const FdTarget& target, Mode mode) {
    const bool full = mode == Mode::kFull;
    Finding f = ignored();
    for (const auto& h : target.peers) {
      if (h.pid == p.pid) {
        merge(f, full ? own_wait(p, t, "a Unix socket to itself") : ignored());
      } else if (in_tree(h.pid)) {
        merge(f, serving_process(h.pid));
      } else if (peers_.pids.count(h.pid) > 0) {
        merge(f, inside("waits on a Unix socket to " + holder_text(h) + ", a process of the job"));
      } else {
        merge(f, full ? outside("waits on a Unix socket to " + holder_text(h)) : ignored());
      }
    }
    if (f.counted) return f;
    if (!full) return ignored();
    return outside("waits on a Unix socket" + (target.local.empty() ? std::string() : " (" + target.local + ")") +
                   " whose other end meshrun could not find");
  }

  Finding pipe_wait(const ProcessWaits& p, const ThreadWait& t, const FdTarget& target, Mode mode) {
    const bool full = mode == Mode::kFull;
    const std::string name = target.kind == FdKind::kFifo ? "a named pipe " + target.local : std::string("a pipe");
    if (!target.peers_known)
      return full ? unknown("waits on " + name + " whose other end meshrun could not find") : ignored();
    Finding f = ignored();
    for (const auto& h : target.peers) {
      const bool other_end = t.writing ? true : h.writes;  // a reader waits on writers; a writer on any holder
      if (!other_end) continue;
      if (h.pid == p.pid) {
        merge(f, full ? own_wait(p, t, name) : ignored());
      } else if (in_tree(h.pid)) {
        merge(f, serving_process(h.pid));
      } else if (peers_.pids.count(h.pid) > 0) {
        merge(f, inside("waits on " + name + " to " + holder_text(h) + ", a process of the job"));
      } else {
        merge(f, outside(fmt::format("waits on {} {} {}", name, t.writing ? "read by" : "fed by", holder_text(h))));
      }
    }
    if (f.counted) return f;
    return full ? outside("waits on " + name + " that no process holds open for " + (t.writing ? "reading" : "writing"))
                : ignored();
  }

  // A process of the tree at the other end of a socket or pipe: what it does is what this wait leads to.
  Finding serving_process(pid_t pid) {
    const auto it = processes_.find(pid);
    if (it == processes_.end()) return unknown(fmt::format("waits on pid {}, which meshrun could not read", pid));
    return child_wait(*it->second, it->second->parent == tree_.processes.front().pid ? "its child" : "pid");
  }

  const TreeWaits& tree_;
  const JobPeers& peers_;
  std::map<pid_t, const ProcessWaits*> processes_;
  std::map<pid_t, const PythonThread*> python_;
  std::vector<std::pair<pid_t, pid_t>> path_;
};

// "urlopen at job.py:14" from the hook's where ("<module> at job.py:14") and call ("urlopen").
std::string where_text(const PythonThread* thread) {
  if (thread == nullptr || thread->where.empty()) return "";
  if (thread->call.empty()) return thread->where;
  const auto at = thread->where.rfind(" at ");
  return thread->call + (at == std::string::npos ? " in " + thread->where : thread->where.substr(at));
}

}  // namespace

std::string_view to_string(WaitPlace value) {
  switch (value) {
    case WaitPlace::kOutside: return "outside";
    case WaitPlace::kInside: return "inside";
    case WaitPlace::kUnknown: break;
  }
  return "unknown";
}

RankWait judge_wait(const TreeWaits& tree, const std::vector<PythonThread>& python, const JobPeers& peers) {
  RankWait w;
  w.read = true;
  if (tree.processes.empty()) {
    w.phrase = "is gone";
    return w;
  }
  for (const auto& p : tree.processes) w.listening.insert(w.listening.end(), p.listening.begin(), p.listening.end());
  const Finding f = Judge(tree, python, peers).main_wait();
  w.place = f.counted ? f.place : WaitPlace::kInside;
  w.remotes = w.place == WaitPlace::kOutside ? f.remotes : std::vector<std::string>{};
  const ThreadWait& main =
      tree.processes.front().threads.empty() ? ThreadWait{} : tree.processes.front().threads.front();
  w.phrase = !f.phrase.empty() ? f.phrase : "waits only on the job itself";
  const PythonThread* main_python = nullptr;
  for (const auto& t : python) {
    if (t.tid == main.tid) main_python = &t;
  }
  w.where = where_text(main_python);
  // A sleep began at most one loop's turn ago: its start says nothing of how long the rank has waited.
  if (main.idle_s >= 0 && tree.read_at_unix_ms > 0 && main.call != WaitCall::kSleep) {
    w.since_unix_ms = tree.read_at_unix_ms - static_cast<int64_t>(main.idle_s * 1000);
  }
  return w;
}

std::string describe(const RankWait& w) {
  std::string text = w.phrase;
  if (w.since_unix_ms > 0) text += ", since " + clock_text(w.since_unix_ms);
  if (!w.where.empty()) text += ", in " + w.where;
  return text;
}

void to_json(nlohmann::json& j, const RankWait& w) {
  j = {
      {"place", to_string(w.place)}, {"phrase", w.phrase},       {"where", w.where}, {"since_unix_ms", w.since_unix_ms},
      {"remotes", w.remotes},        {"listening", w.listening}, {"read", w.read}};
}

void from_json(const nlohmann::json& j, RankWait& w) {
  const std::string place = j.value("place", "unknown");
  w.place = place == "outside" ? WaitPlace::kOutside : place == "inside" ? WaitPlace::kInside : WaitPlace::kUnknown;
  w.phrase = j.value("phrase", "");
  w.where = j.value("where", "");
  w.since_unix_ms = j.value("since_unix_ms", int64_t{0});
  w.remotes = j.value("remotes", std::vector<std::string>{});
  w.listening = j.value("listening", std::vector<std::string>{});
  w.read = j.value("read", false);
}

}  // namespace meshrun::launcher

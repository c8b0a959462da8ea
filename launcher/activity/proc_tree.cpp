#include "launcher/activity/proc_tree.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace meshrun::launcher {
namespace {

// A tree larger than this is cut short: a fork bomb must not make the agent read /proc for seconds.
constexpr size_t kMaxTree = 4096;

uint64_t to_u64(std::string_view text) {
  uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

// "<key>:<spaces><number>" anywhere in `text`.
std::optional<uint64_t> field_value(const std::string& text, std::string_view key) {
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      size_t v = at + key.size();
      while (v < text.size() && (text[v] == ' ' || text[v] == '\t')) ++v;
      return to_u64(std::string_view(text).substr(v, text.find('\n', v) - v));
    }
    at += key.size();
  }
  return std::nullopt;
}

// The fields after the command name "(...)", which may itself hold spaces and parentheses.
std::vector<std::string> stat_fields(const std::string& stat) {
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return {};
  std::vector<std::string> out;
  std::istringstream in(stat.substr(paren + 2));
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

pid_t parent_of(const std::string& proc_root, pid_t pid) {
  const auto f = stat_fields(read_proc_file(proc_root + "/" + std::to_string(pid) + "/stat"));
  return f.size() > 1 ? static_cast<pid_t>(to_u64(f[1])) : 0;
}

std::vector<pid_t> pids_in(const std::string& text) {
  std::vector<pid_t> out;
  std::istringstream in(text);
  for (long p = 0; in >> p;) out.push_back(static_cast<pid_t>(p));
  return out;
}

// Children from every thread's children file; nullopt when the kernel has none (CONFIG_PROC_CHILDREN off).
std::optional<std::vector<pid_t>> children_from_tasks(const std::string& proc_root, pid_t pid) {
  const std::string tasks = proc_root + "/" + std::to_string(pid) + "/task";
  std::error_code ec;
  if (!std::filesystem::exists(tasks + "/" + std::to_string(pid) + "/children", ec)) return std::nullopt;
  std::vector<pid_t> out;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    for (pid_t c : pids_in(read_proc_file(task.path().string() + "/children"))) out.push_back(c);
  }
  return out;
}

// Every process's parent, for kernels without children files.
std::multimap<pid_t, pid_t> children_by_scan(const std::string& proc_root) {
  std::multimap<pid_t, pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(to_u64(name));
    out.emplace(parent_of(proc_root, pid), pid);
  }
  return out;
}

// The job's own transport threads move the peers' collective bytes: Gloo's loop reads and writes its sockets with
// read() and write(), which /proc counts as the process's I/O. That is not the rank's own work (a rank blocked
// outside a collective still receives its peers' data as they enter it), so their bytes are left out.
constexpr std::string_view kTransportThreads[] = {"gloo_tcp_loop"};

struct ThreadBytes {
  uint64_t read = 0;
  uint64_t written = 0;
};

ThreadBytes transport_thread_bytes(const std::string& dir, pid_t pid) {
  ThreadBytes bytes;
  std::error_code ec;
  const std::string main_thread = std::to_string(pid);
  try {  // the process may end while its threads are listed
    for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
      if (task.path().filename() == main_thread) continue;
      std::string comm = read_proc_file(task.path().string() + "/comm");
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
      if (std::find(std::begin(kTransportThreads), std::end(kTransportThreads), comm) == std::end(kTransportThreads))
        continue;
      const std::string io = read_proc_file(task.path().string() + "/io");
      bytes.read += field_value(io, "rchar:").value_or(0);
      bytes.written += field_value(io, "wchar:").value_or(0);
    }
  } catch (const std::filesystem::filesystem_error&) {
    return {};
  }
  return bytes;
}

}  // namespace

std::string read_proc_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

long clock_ticks_per_second() {
  const long ticks = ::sysconf(_SC_CLK_TCK);
  return ticks > 0 ? ticks : 100;
}

ProcessSample read_process(const std::string& proc_root, pid_t pid) {
  const std::string dir = proc_root + "/" + std::to_string(pid);
  const auto f = stat_fields(read_proc_file(dir + "/stat"));
  if (f.size() < 15 || f[0].empty()) return {};
  ProcessSample s;
  s.pid = pid;
  s.state = f[0][0];
  for (size_t i : {11, 12, 13, 14}) s.cpu_ticks += to_u64(f[i]);  // utime, stime, cutime, cstime
  const std::string io = read_proc_file(dir + "/io");
  const auto rchar = field_value(io, "rchar:");
  const auto wchar = field_value(io, "wchar:");
  s.io_known = rchar && wchar;
  const ThreadBytes transport = transport_thread_bytes(dir, pid);
  s.read_bytes = rchar.value_or(0) - std::min(rchar.value_or(0), transport.read);
  s.write_bytes = wchar.value_or(0) - std::min(wchar.value_or(0), transport.written);
  s.wakeups = field_value(read_proc_file(dir + "/status"), "voluntary_ctxt_switches:").value_or(0);
  return s;
}

TreeSample read_process_tree(const std::string& proc_root, pid_t leader, std::chrono::steady_clock::time_point at) {
  TreeSample tree;
  tree.at = at;
  if (leader <= 0) return tree;
  std::optional<std::multimap<pid_t, pid_t>> scanned;  // read once, only when children files are missing
  std::vector<pid_t> todo{leader};
  std::set<pid_t> seen;
  while (!todo.empty() && tree.processes.size() < kMaxTree) {
    const pid_t pid = todo.back();
    todo.pop_back();
    if (!seen.insert(pid).second) continue;
    ProcessSample s = read_process(proc_root, pid);
    if (s.pid == 0) {
      if (pid == leader) return tree;  // the worker is gone: an empty tree
      continue;
    }
    tree.processes.push_back(s);
    auto children = children_from_tasks(proc_root, pid);
    if (!children) {
      if (!scanned) scanned = children_by_scan(proc_root);
      children.emplace();
      for (auto [it, end] = scanned->equal_range(pid); it != end; ++it) children->push_back(it->second);
    }
    todo.insert(todo.end(), children->begin(), children->end());
  }
  return tree;
}

}  // namespace meshrun::launcher

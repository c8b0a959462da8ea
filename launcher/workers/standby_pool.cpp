#include "launcher/workers/standby_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "common/say.hpp"
#include "launcher/memory/memory_budget.hpp"
#include "launcher/workers/standby_bootstrap.hpp"

namespace meshrun::launcher {
namespace {

// How long take() waits for a standby still importing. A fresh interpreter would start its imports from nothing,
// so waiting is never the slower road while they move; one still importing after this long is taken for stuck
// (on a loaded 2-core machine torch's import took 29 s, past the 20 s this once was).
constexpr int kReadyWaitMs = 120000;
// A standby's size before one was measured (torch 2.15 on CPU: ~0.5 GB resident, half of it shared files).
constexpr long kPriorPssKb = 512 * 1024;
// Standbys that died before they were taken (not a failed import) turn the pool off after this many.
constexpr int kDeathsToTurnOff = 2;
constexpr size_t kMaxReadyMessage = 4096;
constexpr size_t kStderrTail = 400;
// A standby's imports keep one core busy for a few seconds: started beside a job only when one sat idle.
constexpr double kIdleCoresNeeded = 0.9;

UniqueFd warm_up_file(const char* name) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC));
  if (!fd.valid())
    throw SpawnError(std::string("cannot create a file in memory for a standby worker: ") + std::strerror(errno),
                     errno);
  return fd;
}

// The last line of what a standby printed on stderr (why it died).
std::string last_words(int fd) {
  std::string text(kStderrTail, '\0');
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const off_t from = size > static_cast<off_t>(kStderrTail) ? size - static_cast<off_t>(kStderrTail) : 0;
  const ssize_t n = ::pread(fd, text.data(), text.size(), from);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto newline = text.rfind('\n');
  return newline == std::string::npos ? text : text.substr(newline + 1);
}

std::string mib(long kb) { return std::to_string((kb + 512) / 1024) + " MiB"; }

std::string current_folder() {
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  return ec ? std::string("/") : cwd.string();
}

}  // namespace

std::optional<std::string> StandbyPool::refusal(const WorkerCommand& command) {
  if (!command.python) return "the workers are not Python scripts: " + command.why_not_python;
  return std::nullopt;
}

StandbyPool::StandbyPool(StandbySettings settings)
    : settings_(std::move(settings)), standbys_(static_cast<size_t>(settings_.local_world_size)) {
  std::error_code ec;
  std::filesystem::create_directories(settings_.folder, ec);
  if (ec) throw Error("cannot create " + settings_.folder + " for the standby workers: " + ec.message());
  bootstrap_ = settings_.folder + "/_meshrun_standby.py";
  const auto source = standby_bootstrap_source();
  std::ofstream out(bootstrap_, std::ios::binary | std::ios::trunc);
  out.write(source.data(), static_cast<std::streamsize>(source.size()));
  if (!out) throw Error("cannot write the standby workers' bootstrap to " + bootstrap_ + " (set TMPDIR)");
}

StandbyPool::~StandbyPool() = default;  // each WorkerProcess kills its standby's group and reaps it

void StandbyPool::fill(const std::function<std::vector<std::string>(int)>& env_for, Pace pace) {
  poll();
  const auto idle = idle_.since_last();  // read on every call: the next call's figure spans one call's interval
  if (!off_reason_.empty()) return;
  long missing = 0;
  bool importing = false;
  for (const auto& s : standbys_) {
    missing += s.process ? 0 : 1;
    importing = importing || (s.process && !s.ready);
  }
  if (missing == 0) return;
  if (pace == Pace::kIntoIdleCores && (importing || !idle || *idle < kIdleCoresNeeded)) return;
  const MemoryRoom room = memory_room(read_text_file);
  const long each_kb = pss_kb_ > 0 ? pss_kb_ : kPriorPssKb;
  const auto need = static_cast<uint64_t>(missing * each_kb) * 1024;
  if (room.known && need > room.bytes / 2) {
    if (!said_memory_) {
      say("no standby workers for now: " + std::to_string(missing) + " x " + mib(each_kb) + " would take more than " +
          "half of the " + mib(static_cast<long>(room.bytes / 1024)) + " this node has left (" + room.bound +
          "); restarts start fresh interpreters");
      said_memory_ = true;
    }
    return;
  }
  for (size_t lr = 0; lr < standbys_.size(); ++lr) {
    if (standbys_[lr].process) continue;
    try {
      start(static_cast<int>(lr), env_for(static_cast<int>(lr)));
    } catch (const SpawnError& e) {  // the job goes on; its restarts start fresh interpreters
      turn_off(std::string("a standby could not be started: ") + e.what());
      return;
    }
    if (pace == Pace::kIntoIdleCores) return;
  }
}

void StandbyPool::start(int local_rank, std::vector<std::string> env) {
  Standby& s = standbys_.at(static_cast<size_t>(local_rank));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    throw SpawnError(std::string("cannot create a socket pair for a standby worker: ") + std::strerror(errno), errno);
  }
  UniqueFd ours(pair[0]);
  const UniqueFd theirs(pair[1]);
  const int big = 4 << 20;  // a whole environment in one packet (capped by net.core.wmem_max)
  ::setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  const UniqueFd out = warm_up_file("meshrun-standby-stdout");
  UniqueFd err = warm_up_file("meshrun-standby-stderr");
  const WorkerCommand& command = settings_.command;
  SpawnSpec spec{.executable = command.executable,
                 .argv = {command.argv.front()},
                 .env = std::move(env),
                 .stdin_fd = -1,
                 .stdout_fd = out.get(),
                 .stderr_fd = err.get(),
                 .child_sigmask = settings_.child_sigmask,
                 .control_fd = theirs.get()};
  spec.argv.insert(spec.argv.end(), command.python->flags.begin(), command.python->flags.end());
  spec.argv.push_back(bootstrap_);
  spec.argv.emplace_back("3");
  spec.argv.insert(spec.argv.end(), settings_.modules.begin(), settings_.modules.end());
  s.process.emplace(WorkerProcess::spawn(spec));
  s.process->confirm_exec();
  s.control = std::move(ours);
  s.warm_err = std::move(err);
  s.ready.reset();
}

void StandbyPool::poll() {
  for (auto& s : standbys_) {
    if (s.process && !s.ready) await_ready(s, 0);
    if (s.process && s.process->poll()) drop(s, "it exited (" + s.process->status()->describe() + ")", false);
  }
}

bool StandbyPool::await_ready(Standby& s, int wait_ms) {
  if (s.ready) return true;
  pollfd pfd{s.control.get(), POLLIN, 0};
  if (::poll(&pfd, 1, wait_ms) <= 0) return false;
  std::string text(kMaxReadyMessage, '\0');
  const ssize_t n = ::recv(s.control.get(), text.data(), text.size(), MSG_DONTWAIT);
  if (n <= 0) {
    drop(s, "it closed its socket", false);
    return false;
  }
  text.resize(static_cast<size_t>(n));
  try {
    const proto::StandbyReady ready = proto::parse_standby_ready(text);
    if (!ready.ok) {
      drop(s, ready.error, true);
      return false;
    }
    s.ready = ready;
    pss_kb_ = std::max(pss_kb_, ready.pss_kb);
    say_ready_once(ready);
    return true;
  } catch (const ProtocolError& e) {
    drop(s, e.what(), true);
    return false;
  }
}

void StandbyPool::drop(Standby& s, const std::string& why, bool failed) {
  if (!s.process) return;
  const std::string words = s.warm_err.valid() ? last_words(s.warm_err.get()) : "";
  discard(s);
  if (failed) {
    turn_off("a standby could not start: " + why);
  } else if (++deaths_ >= kDeathsToTurnOff) {
    turn_off("a standby died: " + why + (words.empty() ? "" : ": " + words));
  }
}

void StandbyPool::discard(Standby& s) {
  if (s.process) s.process->reap();
  s.process.reset();
  s.control.reset();
  s.warm_err.reset();
  s.ready.reset();
}

void StandbyPool::turn_off(const std::string& reason) {
  if (!off_reason_.empty()) return;
  off_reason_ = reason;
  say("standby workers off: " + reason + "; restarts start fresh interpreters (--no-standby says so from the start)");
  for (auto& s : standbys_) discard(s);
}

void StandbyPool::say_ready_once(const proto::StandbyReady& ready) {
  if (said_ready_) return;
  said_ready_ = true;
  std::string modules;
  for (const auto& m : settings_.modules) modules += (modules.empty() ? "" : ", ") + m;
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", ready.import_s);
  say("standby workers: one per local rank (" + std::to_string(standbys_.size()) + "), " + modules + " imported in " +
      seconds + " s, " + mib(ready.pss_kb) +
      " each (proportional set size); restarts start from them (--no-standby: off)");
}

std::optional<WorkerProcess> StandbyPool::take(int local_rank, const SpawnSpec& spawn) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= standbys_.size()) return std::nullopt;
  Standby& s = standbys_[static_cast<size_t>(local_rank)];
  if (!s.process || !off_reason_.empty()) return std::nullopt;
  if (s.process->poll()) {
    drop(s, "it exited (" + s.process->status()->describe() + ")", false);
    return std::nullopt;
  }
  if (!await_ready(s, kReadyWaitMs)) return std::nullopt;
  const PythonRun& run = *settings_.command.python;
  const proto::StandbyOrder order{.orig_argv = spawn.argv,
                                  .module = run.module,
                                  .target = run.target,
                                  .args = run.args,
                                  .env = spawn.env,
                                  .cwd = current_folder()};
  if (!send_order(s, spawn, order)) return std::nullopt;
  std::optional<WorkerProcess> worker = std::move(s.process);
  s.process.reset();  // a moved-from optional still holds a (moved-from) process
  discard(s);
  return worker;
}

bool StandbyPool::send_order(Standby& s, const SpawnSpec& spawn, const proto::StandbyOrder& order) {
  std::string text;
  try {
    text = proto::format_standby_order(order);
  } catch (const ProtocolError& e) {
    drop(s, e.what(), true);
    return false;
  }
  UniqueFd dev_null;
  int stdin_fd = spawn.stdin_fd;
  if (stdin_fd < 0) {
    dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    stdin_fd = dev_null.get();
  }
  const std::array<int, 3> fds{stdin_fd, spawn.stdout_fd, spawn.stderr_fd};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))] = {};
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(fds));
  std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(fds));
  ssize_t sent;
  do {
    sent = ::sendmsg(s.control.get(), &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent == static_cast<ssize_t>(text.size())) return true;
  drop(s, std::string("it could not be handed its worker: ") + std::strerror(errno), errno == EMSGSIZE);
  return false;
}

std::vector<pid_t> StandbyPool::pids() const {
  std::vector<pid_t> out;
  for (const auto& s : standbys_) {
    if (s.process && s.process->running()) out.push_back(s.process->pid());
  }
  return out;
}

}  // namespace meshrun::launcher

#include "launcher/workers/worker_group.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/signal_set.hpp"
#include "launcher/workers/job_token.hpp"
#include "launcher/workers/standby_pool.hpp"

namespace meshrun::launcher {
namespace {

constexpr size_t kTailLines = 20;
constexpr std::chrono::milliseconds kLeftoverSweep{2000};
constexpr const char* kDefaultPrefix = "[rank${rank}]:";

UniqueFd open_log(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    throw SpawnError("cannot open log file " + path + ": " + std::strerror(errno) + " (check --log-dir)", errno);
  }
  return fd;
}

// The shared copy of the lines matching `filters` (nothing without filters), in the attempt's folder.
std::shared_ptr<const LineDuplicator> make_duplicator(const std::string& attempt_dir, const char* name,
                                                      const std::vector<std::string>& filters) {
  if (filters.empty()) return nullptr;
  std::error_code ec;
  std::filesystem::create_directories(attempt_dir, ec);
  return std::make_shared<const LineDuplicator>(open_log(attempt_dir + "/" + name), filters);
}

std::pair<UniqueFd, UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw SpawnError(std::string("cannot create a pipe for worker output: ") + std::strerror(errno), errno);
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Where one stream of one worker goes.
struct StreamRoute {
  bool console = false;
  bool file = false;
};

StreamRoute route(const GroupSpec& spec, int local_rank, int bit) {
  const bool redirect = (spec.redirects.for_rank(local_rank) & bit) != 0;
  const bool tee = (spec.tee.for_rank(local_rank) & bit) != 0;
  const bool shown = !spec.local_ranks_filter || spec.local_ranks_filter->count(local_rank) > 0;
  return {.console = (!redirect || tee) && shown, .file = spec.log_files || redirect || tee};
}

// What every worker of a group shares while the group starts.
struct GroupStart {
  const GroupSpec& spec;
  WorkerEnvironment env;
  std::string prefix_template;
  UniqueFd dev_null;
  int stdin_fd;
  std::shared_ptr<const LineDuplicator> duplicate_out;
  std::shared_ptr<const LineDuplicator> duplicate_err;

  explicit GroupStart(const GroupSpec& group)
      : spec(group),
        env(group.base_env, group.settings),
        prefix_template(group.prefix_template.empty() ? std::string(kDefaultPrefix) : group.prefix_template),
        dev_null(::open("/dev/null", O_WRONLY | O_CLOEXEC)),
        // A terminal stays with the launcher: workers run in background process groups, where reading it
        // would stop them.
        stdin_fd(::isatty(0) ? -1 : 0),
        duplicate_out(make_duplicator(group.attempt_dir, "filtered_stdout.log", group.duplicate_stdout_filters)),
        duplicate_err(make_duplicator(group.attempt_dir, "filtered_stderr.log", group.duplicate_stderr_filters)) {}
};

// One stream (bit 1: stdout, 2: stderr) of worker `w`: its log file, its pump, and the fd the child gets
// (`child_end` keeps it open until fork() has copied it; `spec_fd` is what the spawn uses).
void plan_stream(const GroupStart& g, Worker& w, int bit, const std::string& prefix, UniqueFd& child_end,
                 int& spec_fd) {
  const StreamRoute r = route(g.spec, w.local_rank, bit);
  const bool keep_tail = (bit == 2);
  const auto& duplicate = bit == 1 ? g.duplicate_out : g.duplicate_err;
  std::string& log_path = bit == 1 ? w.stdout_log : w.stderr_log;
  std::unique_ptr<OutputPump>& pump = bit == 1 ? w.out : w.err;
  UniqueFd file;
  if (r.file) {
    log_path = w.dir + (bit == 1 ? "/stdout.log" : "/stderr.log");
    file = open_log(log_path);
  }
  if (r.console || (keep_tail && !r.file) || duplicate) {
    auto [read_end, write_end] = make_pipe();
    pump = std::make_unique<OutputPump>(std::move(read_end), prefix, r.console ? bit : -1, std::move(file),
                                        keep_tail ? kTailLines : 0, duplicate);
    child_end = std::move(write_end);
  } else if (r.file) {
    child_end = std::move(file);  // file only: the worker writes it directly
  } else {
    spec_fd = g.dev_null.get();
    return;
  }
  spec_fd = child_end.get();
}

// Forks worker `w` (local rank already set) with its folder, environment and streams.
void start_worker(const GroupStart& g, Worker& w) {
  const GroupSpec& spec = g.spec;
  const int lr = w.local_rank;
  w.rank = spec.settings.rank_offset + lr;
  w.dir = spec.attempt_dir + "/" + std::to_string(w.rank);
  std::error_code ec;
  std::filesystem::create_directories(w.dir, ec);
  if (ec) throw SpawnError("cannot create " + w.dir + ": " + ec.message() + " (check --log-dir)", ec.value());
  w.error_file = w.dir + "/error.json";
  const std::string prefix = expand_prefix(g.prefix_template, w.rank, lr, spec.settings.role, spec.hostname);
  const auto socket_index = static_cast<size_t>(lr);
  SpawnSpec s{
      .executable = spec.command.executable,
      .argv = spec.command.argv,
      .env = g.env.for_worker(
          {.local_rank = lr,
           .error_file = w.error_file,
           .progress_socket = socket_index < spec.progress_sockets.size() ? spec.progress_sockets[socket_index] : ""}),
      .stdin_fd = g.stdin_fd,
      .stdout_fd = 1,
      .stderr_fd = 2,
      .child_sigmask = spec.child_sigmask};
  // The child ends of pipes/files must stay open until fork() has copied them.
  UniqueFd child_out, child_err;
  plan_stream(g, w, 1, prefix, child_out, s.stdout_fd);
  plan_stream(g, w, 2, prefix, child_err, s.stderr_fd);
  if (spec.standbys != nullptr) {
    if (auto standby = spec.standbys->take(lr, s)) {
      w.process.emplace(std::move(*standby));
      w.from_standby = true;
      return;
    }
  }
  w.process.emplace(WorkerProcess::spawn(s));
}

}  // namespace

WorkerGroup::WorkerGroup(const GroupSpec& spec)
    : attempt_(spec.attempt),
      attempt_dir_(spec.attempt_dir),
      role_(spec.settings.role),
      hostname_(spec.hostname),
      job_token_(spec.settings.job_token),
      standbys_(spec.standbys) {
  const GroupStart start(spec);
  workers_.resize(static_cast<size_t>(spec.settings.local_world_size));
  try {
    for (size_t lr = 0; lr < workers_.size(); ++lr) {
      workers_[lr].local_rank = static_cast<int>(lr);
      start_worker(start, workers_[lr]);
    }
    // Each exec is confirmed after all forks, so the workers start in parallel.
    for (auto& w : workers_) w.process->confirm_exec();
  } catch (...) {
    finish();
    throw;
  }
}

WorkerGroup::~WorkerGroup() { finish(); }

void WorkerGroup::observe_exits() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (!w.process || !w.process->running()) continue;
    if (w.process->poll()) {
      w.exit_time = std::chrono::system_clock::now();
      if (!w.process->status()->ok() && !first_failure_) first_failure_ = i;
    }
  }
}

std::vector<int> WorkerGroup::wait(SignalSet& signals, std::chrono::milliseconds timeout,
                                   const std::vector<int>& wake_fds) {
  std::vector<pollfd> fds;
  fds.reserve(workers_.size() * 2 + 1 + wake_fds.size());
  fds.push_back({signals.fd(), POLLIN, 0});
  std::vector<OutputPump*> pumps;
  for (auto& w : workers_) {
    for (OutputPump* p : {w.out.get(), w.err.get()}) {
      if (p != nullptr && p->open()) {
        fds.push_back({p->fd(), POLLIN, 0});
        pumps.push_back(p);
      }
    }
  }
  const size_t pump_end = fds.size();
  for (int fd : wake_fds) fds.push_back({fd, POLLIN, 0});
  const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  std::vector<int> received;
  if (ready > 0) {
    for (size_t i = 1; i < pump_end; ++i) {
      if (fds[i].revents != 0) pumps[i - 1]->on_readable();
    }
    if (fds[0].revents != 0) {
      for (int sig : signals.drain()) {
        if (sig != SIGCHLD) received.push_back(sig);
      }
    }
  }
  observe_exits();
  return received;
}

std::vector<pid_t> WorkerGroup::running_pids() const {
  std::vector<pid_t> out;
  for (const auto& w : workers_) out.push_back(w.process && w.process->running() ? w.process->pid() : 0);
  return out;
}

bool WorkerGroup::all_exited() const {
  for (const auto& w : workers_) {
    if (w.process && w.process->running()) return false;
  }
  return true;
}

void WorkerGroup::signal_all(int sig) {
  for (auto& w : workers_) {
    if (w.process && w.process->running()) w.process->signal_group(sig);
  }
}

std::vector<int> WorkerGroup::stop(SignalSet& signals, std::chrono::milliseconds grace, int first_signal) {
  std::vector<int> received;
  observe_exits();
  if (!all_exited()) {
    if (first_signal != 0) signal_all(first_signal);
    // A stopped worker (SIGSTOP, state T) holds the signal pending until it runs again: let it run, so
    // it can exit within the grace period instead of waiting for SIGKILL.
    signal_all(SIGCONT);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!all_exited()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      bool urgent = false;
      for (int sig : wait(signals, std::min(left, std::chrono::milliseconds(100)))) {
        received.push_back(sig);
        if (sig == SIGINT || sig == SIGTERM) urgent = true;  // asked twice: no more grace
      }
      if (urgent) break;
    }
  }
  finish();
  return received;
}

void WorkerGroup::finish() {
  if (finished_) return;
  finished_ = true;
  observe_exits();
  // Group-wide SIGKILL also ends whatever the workers forked, then the leaders are reaped.
  for (auto& w : workers_) {
    if (!w.process) continue;
    const bool was_running = w.process->running();
    w.process->reap();
    if (was_running) w.exit_time = std::chrono::system_clock::now();
  }
  // What the workers spawned and left (a setsid'd child outside their process groups, a daemon).
  if (!job_token_.empty()) {
    kill_processes_with_token(job_token_, kLeftoverSweep,
                              standbys_ != nullptr ? standbys_->pids() : std::vector<pid_t>{});
  }
  // The pipes have no writers left: read what remains.
  for (size_t i = 0; i < workers_.size(); ++i) {
    drain_output(i);
    for (OutputPump* p : {workers_[i].out.get(), workers_[i].err.get()}) {
      if (p != nullptr) p->finish();
    }
  }
}

void WorkerGroup::drain_output(size_t index) {
  Worker& w = workers_.at(index);
  for (OutputPump* p : {w.out.get(), w.err.get()}) {
    if (p == nullptr) continue;
    // Only what is there now: a live writer (a grandchild, or one that escaped with setsid) could keep
    // the pipe open forever.
    for (pollfd pfd{p->fd(), POLLIN, 0}; p->open() && ::poll(&pfd, 1, 0) > 0; pfd.fd = p->fd()) {
      if (!p->on_readable()) break;
    }
  }
}

FailureInfo WorkerGroup::failure_info(size_t index) const {
  const Worker& w = workers_.at(index);
  FailureInfo f;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.role = role_;
  f.host = hostname_;
  f.pid = w.process ? w.process->pid() : 0;
  if (w.process && w.process->status()) f.status = *w.process->status();
  f.time = w.exit_time;
  f.attempt = attempt_;
  f.error_file = w.error_file;
  if (std::ifstream in(w.error_file); in) {
    std::ostringstream ss;
    ss << in.rdbuf();
    f.error_file_contents = ss.str();
  }
  if (w.err) {
    f.stderr_tail.assign(w.err->tail().begin(), w.err->tail().end());
  } else if (!w.stderr_log.empty()) {
    f.stderr_tail = read_tail(w.stderr_log, kTailLines);
  }
  f.stderr_log = w.stderr_log;
  return f;
}

}  // namespace meshrun::launcher

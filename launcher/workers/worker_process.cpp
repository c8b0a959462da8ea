#include "launcher/workers/worker_process.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace meshrun::launcher {
namespace {

// Moves `from` onto `to` in the child; a descriptor already in place only loses its CLOEXEC flag.
void child_dup(int from, int to) {
  if (from == to) {
    ::fcntl(to, F_SETFD, 0);
  } else {
    ::dup2(from, to);
  }
}

[[noreturn]] void child_fail(int report_fd) {
  const int err = errno;
  [[maybe_unused]] auto n = ::write(report_fd, &err, sizeof(err));
  ::_exit(127);
}

}  // namespace

WorkerProcess WorkerProcess::spawn(const SpawnSpec& spec) {
  // Everything the child touches is prepared here: after fork() only async-signal-safe calls are allowed
  // (the launcher may run the rendezvous daemon on another thread).
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    throw SpawnError(std::string("cannot create a pipe to start a worker: ") + std::strerror(errno), errno);
  }
  UniqueFd report_read(report[0]);
  UniqueFd report_write(report[1]);
  UniqueFd dev_null;
  if (spec.stdin_fd < 0) dev_null.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int stdin_fd = spec.stdin_fd >= 0 ? spec.stdin_fd : dev_null.get();
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    throw SpawnError(std::string("fork failed while starting a worker: ") + std::strerror(errno), errno);
  }
  if (pid == 0) {
    // Child. Own process group, so the launcher can signal the worker and everything it forks at once.
    ::setpgid(0, 0);
    // Die with the launcher, even on kill -9; the check closes the race with a parent that already died.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report[1]);
    if (::getppid() != parent) ::_exit(137);
    // The launcher ignores SIGPIPE and blocks the signals it forwards; the worker starts as if run directly.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &spec.child_sigmask, nullptr);
    if (stdin_fd >= 0) child_dup(stdin_fd, 0);
    child_dup(spec.stdout_fd, 1);
    child_dup(spec.stderr_fd, 2);
    if (spec.control_fd >= 0) child_dup(spec.control_fd, 3);
    // Nothing else of the launcher's (daemon sockets, other workers' pipes) leaks into the worker.
    ::syscall(SYS_close_range, spec.control_fd >= 0 ? 4U : 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(spec.executable.c_str(), argv.data(), envp.data());
    child_fail(report[1]);
  }
  // Parent. Setting the group here too closes the race with an early killpg().
  ::setpgid(pid, pid);
  report_write.reset();
  return WorkerProcess(pid, std::move(report_read));
}

WorkerProcess::WorkerProcess(WorkerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      exec_check_(std::move(other.exec_check_)),
      status_(other.status_),
      reaped_(std::exchange(other.reaped_, true)) {}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !reaped_) reap();
}

void WorkerProcess::confirm_exec() {
  if (!exec_check_.valid()) return;
  int err = 0;
  ssize_t n;
  do {
    n = ::read(exec_check_.get(), &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  exec_check_.reset();
  if (n == static_cast<ssize_t>(sizeof(err))) {
    reap();
    throw SpawnError(std::strerror(err), err);
  }
}

bool WorkerProcess::poll() {
  if (status_) return true;
  siginfo_t info{};
  // WNOWAIT keeps the zombie: its pid (= the group id) stays reserved until reap().
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  if (info.si_pid == 0) return false;
  ExitStatus s;
  if (info.si_code == CLD_EXITED) {
    s.code = info.si_status;
  } else {
    s.signaled = true;
    s.signal = info.si_status;
  }
  status_ = s;
  return true;
}

void WorkerProcess::signal_group(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(-pid_, sig);
}

void WorkerProcess::reap() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(-pid_, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {}
  if (!status_) {
    ExitStatus s;
    if (WIFSIGNALED(wstatus)) {
      s.signaled = true;
      s.signal = WTERMSIG(wstatus);
    } else {
      s.code = WEXITSTATUS(wstatus);
    }
    status_ = s;
  }
  reaped_ = true;
}

}  // namespace meshrun::launcher

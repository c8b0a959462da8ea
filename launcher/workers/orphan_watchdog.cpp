#include "launcher/workers/orphan_watchdog.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "launcher/workers/job_token.hpp"

extern char** environ;

namespace meshrun::launcher {
namespace {

constexpr int kWatchdogFd = 3;  // where the watchdog finds the pipe's read end
constexpr auto kSweepLimit = std::chrono::seconds(5);

}  // namespace

OrphanWatchdog::OrphanWatchdog(const std::string& token) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  UniqueFd read_end(fds[0]);
  write_end_.reset(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawnattr_init(&attr);
  ::posix_spawn_file_actions_adddup2(&actions, read_end.get(), kWatchdogFd);  // dup2 clears close-on-exec
  ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  // Its own session: a Ctrl-C to the terminal or a kill of meshrun's process group leaves it running.
  sigset_t none;
  sigemptyset(&none);
  ::posix_spawnattr_setsigmask(&attr, &none);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  std::string exe = "/proc/self/exe";
  std::string command = kOrphanWatchdogCommand;
  std::string fd_text = std::to_string(kWatchdogFd);
  std::string token_text = token;
  char* argv[] = {exe.data(), command.data(), fd_text.data(), token_text.data(), nullptr};
  const int rc = ::posix_spawn(&pid_, exe.c_str(), &actions, &attr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  if (rc != 0) throw Error(std::string("cannot start the orphan watchdog: ") + std::strerror(rc));
}

OrphanWatchdog::~OrphanWatchdog() {
  write_end_.reset();
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
  }
}

int run_orphan_watchdog(int fd, const std::string& token) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  char byte;
  while (::read(fd, &byte, 1) < 0 && errno == EINTR) {
    // Nobody writes: read returns 0 (end-of-file) once the launcher's write end is closed.
  }
  const size_t killed = kill_processes_with_token(token, kSweepLimit);
  if (killed > 0) {
    std::fprintf(stderr, "meshrun: the launcher is gone: killed %zu process(es) its workers left behind\n", killed);
  }
  return 0;
}

}  // namespace meshrun::launcher

#include "common/signal_set.hpp"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace meshrun {

SignalSet::SignalSet(const std::vector<int>& handled) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (int sig : handled) sigaddset(&mask, sig);
  if (::pthread_sigmask(SIG_BLOCK, &mask, &original_mask_) != 0) {
    throw Error(std::string("cannot block signals: ") + std::strerror(errno));
  }
  fd_.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_.valid()) {
    ::pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
    throw Error(std::string("signalfd failed: ") + std::strerror(errno));
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &original_pipe_);
}

SignalSet::~SignalSet() {
  ::sigaction(SIGPIPE, &original_pipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &original_mask_, nullptr);
}

std::vector<int> SignalSet::drain() {
  std::vector<int> out;
  signalfd_siginfo info{};
  while (true) {
    const ssize_t n = ::read(fd_.get(), &info, sizeof(info));
    if (n != static_cast<ssize_t>(sizeof(info))) break;
    out.push_back(static_cast<int>(info.ssi_signo));
  }
  return out;
}

int SignalSet::drain_terminating() {
  int last = 0;
  for (int sig : drain()) {
    if (sig != SIGCHLD && is_terminating_signal(sig)) last = sig;
  }
  return last;
}

bool is_terminating_signal(int sig) { return sig != SIGUSR1 && sig != SIGUSR2 && sig != SIGCHLD && sig != SIGCONT; }

}  // namespace meshrun

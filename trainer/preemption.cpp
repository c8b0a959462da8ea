#include "trainer/preemption.hpp"

#include <pthread.h>
#include <time.h>

namespace meshrun::trainer {

PreemptionWatch::PreemptionWatch(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  sigemptyset(&set_);
  sigaddset(&set_, SIGUSR1);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, &previous_);
}

PreemptionWatch::~PreemptionWatch() {
  // After a preemption the process is on its way out with kCheckpointedOnSignal: leave the signals blocked,
  // or the launcher's follow-up SIGTERM (it stops the group once one worker exits) would replace that
  // exit code with a death by signal.
  if (enabled_ && received_ == 0 && !stopping_) pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

int PreemptionWatch::poll() {
  if (!enabled_ || received_ != 0) return received_;
  const timespec zero{0, 0};
  const int sig = sigtimedwait(&set_, nullptr, &zero);
  if (sig > 0) received_ = sig;
  return received_;
}

}  // namespace meshrun::trainer

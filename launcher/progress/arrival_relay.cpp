#include "launcher/progress/arrival_relay.hpp"

namespace meshrun::launcher {

bool ArrivalRelay::asked_for(const std::string& group, int64_t first_seq, int64_t last_seq) const {
  return group == asked_.group && first_seq == asked_.first_seq && last_seq == asked_.last_seq;
}

bool ArrivalRelay::answered(size_t lr) const {
  const auto& a = progress_.watch(lr).arrivals();
  return a && asked_for(a->group, a->first_seq, a->last_seq);
}

bool ArrivalRelay::awaited(size_t lr, const std::vector<pid_t>& pids) const {
  const bool running = lr < pids.size() && pids[lr] != 0;
  return progress_.watch(lr).hooked() && running && !answered(lr);
}

bool ArrivalRelay::send(const std::function<bool(size_t)>& ask) const {
  const auto request = proto::HookRequest::arrivals(asked_.first_seq, asked_.last_seq, asked_.group);
  bool sent = false;
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    if (!ask(lr)) continue;
    progress_.ask_hook(lr, request);
    sent = true;
  }
  return sent;
}

void ArrivalRelay::ask(const proto::ArrivalProbe& probe, Clock::time_point now) {
  if (probe.group.empty()) {
    answers_pending_ = false;  // none open (answered by every node, given up, or not wanted)
    return;
  }
  if (asked_for(probe.group, probe.first_seq, probe.last_seq)) {
    return;  // still open for another node, or for a silent rank here (ask_again)
  }
  asked_ = probe;
  asked_at_ = now;
  answers_pending_ = send([&](size_t lr) { return progress_.watch(lr).hooked(); });
}

void ArrivalRelay::ask_again(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (!answers_pending_ || now - asked_at_ < kAskAgainAfter) return;
  asked_at_ = now;
  send([&](size_t lr) { return awaited(lr, pids); });
}

bool ArrivalRelay::take_answers(const std::vector<pid_t>& pids) {
  if (!answers_pending_) return false;
  for (size_t lr = 0; lr < progress_.size(); ++lr) {
    if (awaited(lr, pids)) return false;
  }
  answers_pending_ = false;
  return true;
}

}  // namespace meshrun::launcher

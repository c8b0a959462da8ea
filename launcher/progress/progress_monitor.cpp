#include "launcher/progress/progress_monitor.hpp"

#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/error.hpp"

namespace meshrun::launcher {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= stat.size() ? '\0' : stat[paren + 2];
}

ProgressMonitor::ProgressMonitor(const std::string& dir, const std::vector<int>& ranks, HangPolicy policy,
                                 int64_t steps_done)
    : policy_(policy),
      accountants_(ranks.size(), StepAccountant(steps_done)),
      collective_accountants_(ranks.size()),
      watches_(ranks.size()),
      stopped_since_(ranks.size()),
      activity_(ranks.size()),
      late_(ranks.size()) {
  sockets_.reserve(ranks.size());
  report_sockets_.reserve(ranks.size());
  trackers_.reserve(ranks.size());
  for (size_t lr = 0; lr < ranks.size(); ++lr) {
    sockets_.emplace_back(dir + "/" + std::to_string(lr) + ".sock");
    report_sockets_.emplace_back(sockets_.back().path() + kHookReportSuffix);
    trackers_.emplace_back(ranks[lr]);
  }
}

std::vector<std::string> ProgressMonitor::socket_paths() const {
  std::vector<std::string> out;
  for (const auto& s : sockets_) out.push_back(s.path());
  return out;
}

std::vector<int> ProgressMonitor::fds() const {
  std::vector<int> out;
  for (const auto& s : sockets_) out.push_back(s.fd());
  for (const auto& s : report_sockets_) out.push_back(s.fd());
  return out;
}

void ProgressMonitor::drain(Clock::time_point now) {
  for (size_t lr = 0; lr < sockets_.size(); ++lr) {
    for (auto* socket : {&sockets_[lr], &report_sockets_[lr]}) {
      for (const auto& datagram : socket->drain()) take(lr, datagram, now);
    }
  }
}

void ProgressMonitor::take(size_t lr, const std::string& datagram, Clock::time_point now) {
  try {
    if (proto::is_hook_message(datagram)) {
      spdlog::debug("rank {}: {}", trackers_[lr].rank(), datagram);
      const proto::HookMessage message = proto::parse_hook_message(datagram);
      watches_[lr].on_message(message, now, unix_time_ns());
      if (message.kind == proto::HookMessage::Kind::kStatus)
        collective_accountants_[lr].on_status(watches_[lr].completed(), now);
      return;
    }
    const proto::Beat beat = proto::parse_beat(datagram);
    accountants_[lr].on_beat(beat, now, trackers_[lr].median_step_s());  // the median before this interval
    trackers_[lr].on_beat(beat, now);
  } catch (const ProtocolError& e) {
    if (warned_bad_beat_.insert(lr).second) {
      spdlog::warn("rank {}: ignoring a malformed {} message (reported once): {}", trackers_[lr].rank(), kProgressEnv,
                   e.what());
    }
  }
}

proto::StepAccount ProgressMonitor::step_account(Clock::time_point now) const {
  for (const auto& a : accountants_) {
    if (a.started()) return a.account(now);
  }
  for (const auto& a : collective_accountants_) {
    if (a.started()) return a.account(now);
  }
  proto::StepAccount none;
  none.measure = proto::AccountMeasure::kNone;
  return none;
}

void ProgressMonitor::close_accounts(Clock::time_point now) {
  for (auto& a : accountants_) a.close(now);
  for (auto& a : collective_accountants_) a.close();
}

void ProgressMonitor::watch_activity(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (!activity_.sample(pids, now)) return;
  if (activity_samples_++ % 2 != 0) return;
  for (size_t lr = 0; lr < sockets_.size(); ++lr) {
    if (watches_[lr].hooked())
      sockets_[lr].send_to(hook_path(lr), proto::format_hook_request(proto::HookRequest::frames()));
  }
}

Activity ProgressMonitor::activity(size_t lr, double window_s) const {
  // The stack's motion is judged on the reads since the wait began: the window's older sample can be older than
  // the wait, and one frame read before it (the rank's last step) would read as motion.
  const auto wait_began =
      Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(window_s));
  const auto since = std::max(activity_.window_start(lr, window_s), wait_began);
  return activity_.activity(lr, watches_[lr].stack_motion(since), window_s);
}

std::optional<std::string> ProgressMonitor::late(size_t lr, Clock::time_point now) const {
  const auto& mark = late_[lr];
  if (!mark || now >= mark->until) return std::nullopt;
  if (!mark->group.empty() && watches_[lr].last_enqueued(mark->group) >= mark->seq) return std::nullopt;  // it entered
  if (mark->group.empty() && trackers_[lr].has_beaten() && trackers_[lr].last_at() > mark->marked_at) {
    return std::nullopt;  // it beat again
  }
  return mark->line;
}

std::optional<std::string> ProgressMonitor::silence_verdict(size_t lr, Clock::time_point now) const {
  if (now < quiet_until_) return std::nullopt;
  const RankTracker& t = trackers_[lr];
  const auto budget = policy_.budget_s(t);
  if (!budget) return std::nullopt;
  const double silent = seconds(now - t.last_at());
  if (silent <= *budget) return std::nullopt;
  return fmt::format("no progress beat for {:.1f} s (budget {:.1f} s) after step {} ({})", silent, *budget,
                     t.last().step, t.last().phase);
}

std::optional<std::string> ProgressMonitor::stopped_verdict(size_t lr, pid_t pid, Clock::time_point now) {
  const auto budget = policy_.stopped_budget_s();
  if (!budget || pid <= 0 || process_state(pid) != 'T') {
    stopped_since_[lr].reset();
    return std::nullopt;
  }
  if (!stopped_since_[lr]) stopped_since_[lr] = now;
  const double stopped = seconds(now - *stopped_since_[lr]);
  if (stopped <= *budget) return std::nullopt;
  std::string where;
  if (trackers_[lr].has_beaten()) {
    where = fmt::format(" after step {} ({})", trackers_[lr].last().step, trackers_[lr].last().phase);
  }
  return fmt::format("stopped by a signal (state T) for {:.1f} s (budget {:.1f} s){}", stopped, *budget, where);
}

int64_t ProgressMonitor::last_step(size_t lr) const {
  return trackers_[lr].has_beaten() ? trackers_[lr].last().step : -1;
}

// The culprit, not the first rank to notice: when one rank stops or blocks, the others go silent too,
// waiting for it in a collective. So a stopped worker is named first (it explains everyone's silence),
// then among the silent ranks the one whose last step is lowest (the others got further), then the one
// silent longest.
std::optional<HangReport> ProgressMonitor::find_hang(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (hung_) return std::nullopt;
  std::optional<size_t> silent_culprit;
  std::optional<std::string> silent_reason;
  bool anyone_silent = false;
  for (size_t lr = 0; lr < trackers_.size(); ++lr) {
    const pid_t pid = lr < pids.size() ? pids[lr] : 0;
    if (pid <= 0) continue;
    if (auto stopped = stopped_verdict(lr, pid, now)) {
      hung_ = lr;
      return HangReport{lr, trackers_[lr].rank(), *stopped, last_step(lr), 0, proto::SuspicionRoute::kStopped};
    }
    auto reason = silence_verdict(lr, now);
    if (!reason) continue;
    anyone_silent = true;
    const auto earlier = [&](size_t a, size_t b) {
      const auto& x = trackers_[a];
      const auto& y = trackers_[b];
      return x.last().step != y.last().step ? x.last().step < y.last().step : x.last_at() < y.last_at();
    };
    if (!silent_culprit || earlier(lr, *silent_culprit)) {
      silent_culprit = lr;
      silent_reason = reason;
    }
  }
  if (!anyone_silent) return std::nullopt;
  if (auto stopped =
          stopped_now(pids, now, fmt::format("rank {}: {}", trackers_[*silent_culprit].rank(), *silent_reason))) {
    return stopped;
  }
  hung_ = silent_culprit;
  return HangReport{*silent_culprit,
                    trackers_[*silent_culprit].rank(),
                    *silent_reason,
                    last_step(*silent_culprit),
                    seconds(now - trackers_[*silent_culprit].last_at()),
                    proto::SuspicionRoute::kSilence};
}

// A worker stopped right now, even for less than its own budget, is the better culprit than a rank found
// waiting (or silent): it explains the wait. `context` is what was found ("rank 0: waits in ...").
std::optional<HangReport> ProgressMonitor::stopped_now(const std::vector<pid_t>& pids, Clock::time_point now,
                                                       const std::string& context) {
  for (size_t lr = 0; lr < trackers_.size(); ++lr) {
    if (lr >= pids.size() || pids[lr] <= 0 || !stopped_since_[lr]) continue;
    std::string where;
    if (trackers_[lr].has_beaten())
      where = fmt::format(" after step {} ({})", last_step(lr), trackers_[lr].last().phase);
    hung_ = lr;
    return HangReport{lr,
                      trackers_[lr].rank(),
                      fmt::format("stopped by a signal (state T) for {:.1f} s{} while the other ranks wait ({})",
                                  seconds(now - *stopped_since_[lr]), where, context),
                      last_step(lr),
                      0,
                      proto::SuspicionRoute::kStopped};
  }
  return std::nullopt;
}

std::optional<HangReport> ProgressMonitor::find_collective_wait(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (hung_ || now < quiet_until_) return std::nullopt;
  for (size_t lr = 0; lr < watches_.size(); ++lr) {
    // A stopped worker's hook is stopped too: its last status (perhaps inside an earlier collective) is stale.
    if (lr >= pids.size() || pids[lr] <= 0 || stopped_since_[lr]) continue;
    const auto wait = watches_[lr].oldest_wait();
    const auto budget = policy_.collective_budget_s(watches_[lr], trackers_[lr]);
    if (!wait || !budget) continue;
    const double waited = seconds(now - wait->since);
    if (waited <= *budget) continue;
    const std::string reason = fmt::format("waits in collective #{} of group {} for {:.1f} s (budget {:.1f} s)",
                                           wait->seq, wait->group, waited, *budget);
    if (auto stopped = stopped_now(pids, now, fmt::format("rank {} {}", trackers_[lr].rank(), reason))) return stopped;
    return HangReport{lr, trackers_[lr].rank(), reason, last_step(lr), waited, proto::SuspicionRoute::kCollectiveWait};
  }
  return std::nullopt;
}

std::string ProgressMonitor::request_dump(size_t lr, const std::string& path) {
  if (!watches_[lr].hooked()) return "it has no hook";
  watches_[lr].clear_dump_answer();
  const std::string hook = hook_path(lr);
  int error = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    error = sockets_[lr].send_to(hook, proto::format_hook_request(proto::HookRequest::dump(path)));
    if (error != EAGAIN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its queue is full: the hook is behind
  }
  return error == 0 ? std::string() : "cannot reach the hook's socket " + hook + ": " + std::strerror(error);
}

std::string ProgressMonitor::hook_path(size_t lr) const { return sockets_[lr].path() + ".hook"; }

void ProgressMonitor::ask_clocks() {
  for (size_t lr = 0; lr < sockets_.size(); ++lr) {
    if (watches_[lr].hooked()) {
      sockets_[lr].send_to(hook_path(lr), proto::format_hook_request(proto::HookRequest::clock(unix_time_ns())));
    }
  }
}

bool ProgressMonitor::asked_for(const std::string& group, int64_t first_seq, int64_t last_seq) const {
  return group == asked_.group && first_seq == asked_.first_seq && last_seq == asked_.last_seq;
}

bool ProgressMonitor::answered(size_t lr) const {
  const auto& a = watches_[lr].arrivals();
  return a && asked_for(a->group, a->first_seq, a->last_seq);
}

bool ProgressMonitor::awaited(size_t lr, const std::vector<pid_t>& pids) const {
  const bool running = lr < pids.size() && pids[lr] != 0;
  return watches_[lr].hooked() && running && !answered(lr);
}

bool ProgressMonitor::send_arrival_requests(const std::function<bool(size_t)>& ask) {
  const std::string request =
      proto::format_hook_request(proto::HookRequest::arrivals(asked_.first_seq, asked_.last_seq, asked_.group));
  bool sent = false;
  for (size_t lr = 0; lr < sockets_.size(); ++lr) {
    if (!ask(lr)) continue;
    sockets_[lr].send_to(hook_path(lr), request);
    sent = true;
  }
  return sent;
}

void ProgressMonitor::ask_arrivals(const proto::ArrivalProbe& probe, Clock::time_point now) {
  if (probe.group.empty()) {
    answers_pending_ = false;  // none open (answered by every node, given up, or not wanted)
    return;
  }
  if (asked_for(probe.group, probe.first_seq, probe.last_seq)) {
    return;  // still open for another node, or for a silent rank here (ask_arrivals_again)
  }
  asked_ = probe;
  asked_at_ = now;
  answers_pending_ = send_arrival_requests([&](size_t lr) { return watches_[lr].hooked(); });
}

void ProgressMonitor::ask_arrivals_again(const std::vector<pid_t>& pids, Clock::time_point now) {
  if (!answers_pending_ || now - asked_at_ < kAskAgainAfter) return;
  asked_at_ = now;
  send_arrival_requests([&](size_t lr) { return awaited(lr, pids); });
}

bool ProgressMonitor::take_arrival_answers(const std::vector<pid_t>& pids) {
  if (!answers_pending_) return false;
  for (size_t lr = 0; lr < watches_.size(); ++lr) {
    if (awaited(lr, pids)) return false;
  }
  answers_pending_ = false;
  return true;
}

namespace {

// The hook's answer on the daemon's clock: the worker's clock minus its offset from the agent's, minus the
// agent's offset from the daemon's. Nothing while either offset is unmeasured.
proto::ArrivalBlock on_daemon_clock(const proto::ArrivalAnswer& a, const std::optional<OffsetEstimate>& worker,
                                    const std::optional<OffsetEstimate>& node) {
  if (!worker || !node || a.count == 0) return {};
  return proto::ArrivalBlock{.group = a.group,
                             .first_seq = a.first_seq,
                             .last_seq = a.last_seq,
                             .count = a.count,
                             .mean_unix_s = static_cast<double>(a.mean_ns) * 1e-9 - worker->offset_s - node->offset_s,
                             .span_s = static_cast<double>(a.span_ns) * 1e-9,
                             .uncertainty_s = worker->uncertainty_s + node->uncertainty_s};
}

}  // namespace

std::vector<proto::RankProgress> ProgressMonitor::summaries(Clock::time_point now,
                                                            std::optional<OffsetEstimate> node_clock) const {
  std::vector<proto::RankProgress> out;
  for (size_t lr = 0; lr < trackers_.size(); ++lr) {
    const CollectiveWatch& w = watches_[lr];
    auto completed = w.completed();
    const auto late_line = late(lr, now);
    if (!trackers_[lr].has_beaten() && completed.empty() && !late_line) continue;
    proto::RankProgress p;  // a rank without beats: only its collectives speak for it
    if (trackers_[lr].has_beaten()) {
      p = trackers_[lr].summary(now, hung_ == lr);
    } else {
      p.rank = trackers_[lr].rank();
      p.hung = hung_ == lr;
    }
    p.collectives = std::move(completed);
    p.late = late_line.has_value();
    p.late_reason = late_line.value_or("");
    if (w.arrivals()) p.arrivals = on_daemon_clock(*w.arrivals(), w.clock_offset(), node_clock);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace meshrun::launcher

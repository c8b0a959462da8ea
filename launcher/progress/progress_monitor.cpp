#include "launcher/progress/progress_monitor.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "common/error.hpp"

namespace meshrun::launcher {

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= stat.size() ? '\0' : stat[paren + 2];
}

ProgressMonitor::ProgressMonitor(const std::string& dir, const std::vector<int>& ranks, int64_t steps_done)
    : accountants_(ranks.size(), StepAccountant(steps_done)),
      collective_accountants_(ranks.size()),
      watches_(ranks.size()) {
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

int64_t ProgressMonitor::last_step(size_t lr) const {
  return trackers_[lr].has_beaten() ? trackers_[lr].last().step : -1;
}

std::string ProgressMonitor::request_dump(size_t lr, const std::string& path) {
  if (!watches_[lr].hooked()) return "it has no hook";
  watches_[lr].clear_dump_answer();
  const std::string hook = hook_path(lr);
  int error = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    error = ask_hook(lr, proto::HookRequest::dump(path));
    if (error != EAGAIN) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its queue is full: the hook is behind
  }
  return error == 0 ? std::string() : "cannot reach the hook's socket " + hook + ": " + std::strerror(error);
}

std::string ProgressMonitor::hook_path(size_t lr) const { return sockets_[lr].path() + ".hook"; }

int ProgressMonitor::ask_hook(size_t lr, const proto::HookRequest& request) const {
  return sockets_[lr].send_to(hook_path(lr), proto::format_hook_request(request));
}

void ProgressMonitor::ask_clocks() const {
  for (size_t lr = 0; lr < sockets_.size(); ++lr) {
    if (watches_[lr].hooked()) ask_hook(lr, proto::HookRequest::clock(unix_time_ns()));
  }
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

std::vector<proto::RankProgress> ProgressMonitor::summaries(Clock::time_point now, const RankMarks& marks,
                                                            std::optional<OffsetEstimate> node_clock) const {
  std::vector<proto::RankProgress> out;
  for (size_t lr = 0; lr < trackers_.size(); ++lr) {
    const CollectiveWatch& w = watches_[lr];
    auto completed = w.completed();
    const auto late_line = lr < marks.late.size() ? marks.late[lr] : std::nullopt;
    if (!trackers_[lr].has_beaten() && completed.empty() && !late_line) continue;
    proto::RankProgress p;  // a rank without beats: only its collectives speak for it
    if (trackers_[lr].has_beaten()) {
      p = trackers_[lr].summary(now, marks.hung == lr);
    } else {
      p.rank = trackers_[lr].rank();
      p.hung = marks.hung == lr;
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

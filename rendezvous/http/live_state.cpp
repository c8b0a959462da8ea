#include "rendezvous/http/live_state.hpp"

#include <algorithm>

namespace meshrun::rendezvous::http {
namespace {

// The lag probe: a timer this often; its lateness is how long a request waits for the io thread now.
constexpr auto kTickInterval = std::chrono::milliseconds(100);
// /health reports the worst lateness over this window, so a stall is still visible after it ended.
constexpr auto kLagWindow = std::chrono::seconds(10);
// Curves get one sample per run this often at most (status() walks every node: not on every tick).
constexpr auto kSampleInterval = std::chrono::seconds(1);

}  // namespace

LiveState::LiveState(boost::asio::io_context& io, std::function<proto::StatusReply()> status)
    : status_(std::move(status)), timer_(io), next_sample_(started_) {
  schedule_tick();
}

double LiveState::seconds_since_start(Clock::time_point t) const {
  return std::chrono::duration<double>(t - started_).count();
}

void LiveState::schedule_tick() {
  due_ = Clock::now() + kTickInterval;
  timer_.expires_at(due_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    on_tick();
    schedule_tick();
  });
}

void LiveState::on_tick() {
  const auto now = Clock::now();
  lags_.emplace_back(now, std::max(0.0, std::chrono::duration<double>(now - due_).count()));
  while (!lags_.empty() && now - lags_.front().first > kLagWindow) lags_.pop_front();
  if (now < next_sample_) return;
  next_sample_ = now + kSampleInterval;
  const auto status = status_();
  std::map<std::string, RunHistory> kept;  // runs the daemon forgot lose their curves
  for (const auto& run : status.runs) {
    auto it = history_.find(run.run_id);
    RunHistory history = it == history_.end() ? RunHistory() : std::move(it->second);
    history.record(run, seconds_since_start(now));
    kept.emplace(run.run_id, std::move(history));
  }
  history_ = std::move(kept);
}

LiveSnapshot LiveState::snapshot() const {
  LiveSnapshot s;
  s.status = status_();
  s.history = history_;
  s.now_s = seconds_since_start(Clock::now());
  for (const auto& [when, lag] : lags_) s.io_lag_s = std::max(s.io_lag_s, lag);
  return s;
}

}  // namespace meshrun::rendezvous::http

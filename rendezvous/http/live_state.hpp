// LiveState: the part of the HTTP live view that lives on the daemon's io thread, beside the state it
// reads. It samples each run's progress into a RunHistory once a second, measures how late the io loop
// runs its timers (the lag /health reports), and copies all of it into a LiveSnapshot on request. The
// HTTP thread never touches daemon state: it asks for a snapshot (http_server.hpp) and renders that.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "proto/rendezvous/rendezvous_messages.hpp"
#include "rendezvous/http/run_history.hpp"

namespace meshrun::rendezvous::http {

/// Everything an HTTP request may show, copied on the io thread.
struct LiveSnapshot {
  proto::StatusReply status;                  // what `status --json` prints
  std::map<std::string, RunHistory> history;  // per run id present in status
  double now_s = 0;                           // LiveState's clock when taken (for the samples' ages)
  double io_lag_s = 0;                        // worst lateness of the io loop's ticks over the last window
};

class LiveState {
 public:
  /// Ticks on `io` (the daemon's io thread); `status` is called there and must outlive this object.
  LiveState(boost::asio::io_context& io, std::function<proto::StatusReply()> status);
  LiveState(const LiveState&) = delete;
  LiveState& operator=(const LiveState&) = delete;

  /// io thread only.
  LiveSnapshot snapshot() const;
  /// Stops ticking (shutdown); io thread only.
  void stop() { timer_.cancel(); }

 private:
  using Clock = std::chrono::steady_clock;

  void schedule_tick();
  void on_tick();
  double seconds_since_start(Clock::time_point t) const;

  std::function<proto::StatusReply()> status_;
  boost::asio::steady_timer timer_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point due_;
  std::deque<std::pair<Clock::time_point, double>> lags_;  // (when, lateness) over the lag window
  Clock::time_point next_sample_;
  std::map<std::string, RunHistory> history_;
};

}  // namespace meshrun::rendezvous::http

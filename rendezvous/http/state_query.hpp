// StateQuery: how the HTTP thread reads daemon state without touching it. It posts a snapshot request to
// the daemon's io thread (where LiveState lives) and gets the copy back on the HTTP thread; a deadline
// answers "no snapshot" instead when the io thread is stuck, which is what /health reports as 503.
//
//   HTTP thread                    io thread
//   ask() --post---------------->  live.snapshot()
//     deadline timer armed          |
//   done(snapshot) <----post-------+      (or, first: deadline -> done(nullptr))
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>

#include "rendezvous/http/live_state.hpp"

namespace meshrun::rendezvous::http {

/// Gets the snapshot (null when the deadline passed first) and the seconds the answer took.
using SnapshotHandler = std::function<void(std::shared_ptr<const LiveSnapshot>, double answer_s)>;

class StateQuery {
 public:
  /// `http_io` runs the HTTP thread; `state_io` the daemon's io thread, where `live` lives.
  StateQuery(boost::asio::io_context& http_io, boost::asio::io_context& state_io, LiveState& live)
      : http_io_(http_io), state_io_(state_io), live_(live) {}

  /// Calls `done` exactly once, on the HTTP thread, within `deadline` (unless the HTTP thread stops).
  void ask(std::chrono::milliseconds deadline, SnapshotHandler done);

 private:
  boost::asio::io_context& http_io_;
  boost::asio::io_context& state_io_;
  LiveState& live_;
};

}  // namespace meshrun::rendezvous::http

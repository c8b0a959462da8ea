// NodeRendezvous: this agent's side of the rendezvous. Decides whether this launcher hosts the daemon
// (in-process, on a background thread), then joins rounds, heartbeats, reports failures and leaves
// through proto::RendezvousClient.
//
// Hosting rule:  --standalone            host on 127.0.0.1, a free port
//                static, node rank 0     host on --master-port (a free port when --nnodes 1 and none given)
//                c10d, endpoint is local host it, unless the port is taken: then be a client (as torchrun)
//                (rdzv-conf is_host=1/0 forces the c10d decision)
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/endpoint.hpp"
#include "launcher/cli/options.hpp"
#include "proto/rendezvous_client.hpp"
#include "proto/rendezvous_messages.hpp"

namespace meshrun::rendezvous {
class Server;
}

namespace meshrun::launcher {

class SignalSet;

class NodeRendezvous {
 public:
  /// Starts the daemon here when this node hosts it, then connects (retrying until the join timeout).
  /// A terminating signal while connecting is recorded in interrupted_by() and ends the wait.
  NodeRendezvous(const LaunchOptions& options, SignalSet& signals);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  /// Joins the next round and waits for its assignment, saying what it waits for every few seconds.
  /// Returns nullopt when a terminating signal arrived (see interrupted_by()). Throws RemoteError
  /// (the daemon refused or the run failed) and TimeoutError (join timeout).
  std::optional<proto::Assignment> join();
  /// One keep-alive, bounded by keep_alive_interval; "restart" in the reply means the round was invalidated,
  /// "fail" that the run failed. Throws NetworkError/TimeoutError when the daemon does not answer in time
  /// (the next call reconnects).
  /// One heartbeat carrying this node's ranks' progress (empty when the workers send no beats).
  proto::HeartbeatReply heartbeat(const std::vector<proto::RankProgress>& progress = {});
  void report_failure(const std::string& reason, proto::RestartCause cause = proto::RestartCause::kWorkerFailed);
  /// Tells the daemon about a failed or hung worker at once (root cause across nodes); never throws.
  void record_failure(const proto::FailureReport& failure);
  /// The run's latest failing round's reports, earliest first (empty when the daemon is unreachable).
  std::vector<proto::FailureReport> failures();
  void leave(const std::string& reason, bool ok);
  /// Hosting agent only: blocks until every other node left (the daemon serves their workers' store),
  /// or a terminating signal arrives.
  void wait_for_other_nodes();
  /// Hosting agent only, after the run failed or this node gave up: keeps the daemon up for two keep-alive
  /// intervals so every other agent's next heartbeat gets the reason ("fail"/"restart") instead of a
  /// vanished endpoint. Returns early on a terminating signal.
  void linger_for_others();

  bool connected() const { return client_.has_value(); }
  bool hosting() const { return server_ != nullptr; }
  /// Signal that interrupted a wait, or 0.
  int interrupted_by() const { return interrupted_by_; }
  const std::string& run_id() const { return run_id_; }
  /// The daemon's endpoint, as workers and other nodes reach it.
  const Endpoint& endpoint() const { return endpoint_; }
  const std::string& hostname() const { return hostname_; }

 private:
  bool try_host(const std::string& bind_host, uint16_t port);
  void connect();
  bool check_signals();

  const LaunchOptions& options_;
  SignalSet& signals_;
  std::unique_ptr<rendezvous::Server> server_;
  std::optional<proto::RendezvousClient> client_;
  // Heartbeats use a connection of their own with a short deadline: a daemon that stops answering
  // (host dead, link cut, SIGSTOP) is noticed within the keep-alive timeout, not the 60 s read timeout.
  std::optional<proto::RendezvousClient> beat_client_;
  Endpoint endpoint_;
  std::string run_id_;
  std::string hostname_;
  std::string node_id_;
  int interrupted_by_ = 0;
};

/// True when `host` names this machine (loopback, its host name, or one of its interface addresses).
bool is_local_host(const std::string& host);

/// 16 random hex digits: --standalone's run id.
std::string random_run_id();

}  // namespace meshrun::launcher

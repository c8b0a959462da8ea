// NodeRendezvous: this agent's side of the c10d and static rendezvous (RendezvousBackend over meshrun's
// daemon). Decides whether this launcher hosts the daemon
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

#include "common/clock_offset.hpp"
#include "common/endpoint.hpp"
#include "common/signal_set.hpp"
#include "launcher/rdzv/rendezvous_backend.hpp"
#include "launcher/rdzv/rendezvous_settings.hpp"
#include "proto/rendezvous/rendezvous_client.hpp"
#include "proto/rendezvous/rendezvous_messages.hpp"

namespace meshrun::rendezvous {
class Server;
}

namespace meshrun::launcher {

class NodeRendezvous final : public RendezvousBackend {
 public:
  /// Starts the daemon here when this node hosts it, then connects (retrying until the join timeout).
  /// A terminating signal while connecting is recorded in interrupted_by() and ends the wait.
  NodeRendezvous(const RendezvousSettings& options, SignalSet& signals);
  ~NodeRendezvous() override;
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  std::optional<proto::Assignment> join() override;
  /// A heartbeat on a connection of its own with a short deadline (keep_alive_interval); the next call
  /// reconnects after a failed one.
  proto::HeartbeatReply heartbeat(const std::vector<proto::RankProgress>& progress,
                                  const proto::AttemptMilestones& attempt) override;
  std::optional<OffsetEstimate> clock_offset() const override;
  void report_failure(const std::string& reason, proto::RestartCause cause) override;
  void record_failure(const proto::FailureReport& failure, const proto::AttemptMilestones& attempt) override;
  std::vector<proto::FailureReport> failures() override;
  std::optional<proto::GoodputReport> leave(const std::string& reason, bool ok,
                                            const proto::AttemptMilestones& attempt) override;
  /// Hosting agent only: blocks until every other node left (the daemon serves their workers' store).
  void wait_for_other_nodes() override;
  /// Hosting agent only: keeps the daemon up for two keep-alive intervals so every other agent's next
  /// heartbeat gets the reason ("fail"/"restart") instead of a vanished endpoint.
  void linger_for_others() override;

  bool connected() const { return client_.has_value(); }
  bool hosting() const { return server_ != nullptr; }
  /// Signal that interrupted a wait, or 0.
  int interrupted_by() const override { return interrupted_by_; }
  const std::string& run_id() const override { return run_id_; }
  /// The daemon's endpoint, as workers and other nodes reach it.
  const Endpoint& endpoint() const override { return endpoint_; }
  std::string endpoint_text() const override { return endpoint_.to_string(); }
  const std::string& hostname() const override { return hostname_; }

 private:
  bool try_host(const std::string& bind_host, uint16_t port);
  void connect();
  bool check_signals();

  const RendezvousSettings& options_;
  SignalSet& signals_;
  std::unique_ptr<rendezvous::Server> server_;
  std::optional<proto::RendezvousClient> client_;
  // Heartbeats use a connection of their own with a short deadline: a daemon that stops answering
  // (host dead, link cut, SIGSTOP) is noticed within the keep-alive timeout, not the 60 s read timeout.
  std::optional<proto::RendezvousClient> beat_client_;
  ClockOffset clock_;  // the daemon's clock minus ours, from the heartbeats
  Endpoint endpoint_;
  std::string run_id_;
  std::string hostname_;
  std::string node_id_;
  int interrupted_by_ = 0;
};

}  // namespace meshrun::launcher

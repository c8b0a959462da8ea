#include "launcher/rdzv/node_rendezvous.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <cstdio>
#include <thread>

#include "common/error.hpp"
#include "common/say.hpp"
#include "common/signal_set.hpp"
#include "common/strings.hpp"
#include "launcher/net/host_identity.hpp"
#include "launcher/net/route_interface.hpp"
#include "rendezvous/net/listen_socket.hpp"
#include "rendezvous/server.hpp"

namespace meshrun::launcher {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kDefaultMasterPort = 29500;
// One await call; short, so signals are noticed quickly.
constexpr auto kAwaitSlice = 1s;
// How often the user hears what the rendezvous waits for.
constexpr auto kProgressEvery = 5s;

std::string describe_waiting(const proto::AwaitReply& r) {
  if (r.spare) {
    return "hot spare: the round has its " + std::to_string(r.joined.size()) + " nodes (--nnodes " +
           std::to_string(r.min_nodes) + ":" + std::to_string(r.max_nodes) +
           "); waiting, with no timeout, to take the node rank of a node lost";
  }
  std::string have;
  for (const auto& n : r.joined) {
    if (!have.empty()) have += ", ";
    const int rank = n.group_rank >= 0 ? n.group_rank : n.requested_rank;
    have += (rank >= 0 ? "node " + std::to_string(rank) : std::string("a node")) + " on " + n.host;
  }
  const std::string missing = join(r.missing_ranks, ",");
  char times[64];
  std::snprintf(times, sizeof(times), "%.0f s of %.0f s", r.waited_s, r.join_timeout_s);
  std::string text =
      "waiting for nodes: " + std::to_string(r.joined.size()) + "/" + std::to_string(r.min_nodes) + " joined";
  if (r.max_nodes != r.min_nodes) text += " (max " + std::to_string(r.max_nodes) + ")";
  if (!have.empty() || !missing.empty()) {
    text += " (" + (have.empty() ? std::string("none yet") : "have " + have) +
            (missing.empty() ? "" : "; missing " + missing) + ")";
  }
  return text + " \u2014 " + times;
}

}  // namespace

NodeRendezvous::NodeRendezvous(const RendezvousSettings& options, SignalSet& signals)
    : options_(options), signals_(signals), run_id_(options.run_id), hostname_(local_hostname()) {
  if (options.standalone || (options.backend == RdzvBackend::kC10d && !options.rdzv_endpoint)) {
    // One node, nothing else to meet: a private daemon on a free loopback port.
    if (run_id_.empty()) run_id_ = random_run_id();
    try_host("127.0.0.1", 0);
  } else if (options.backend == RdzvBackend::kStatic) {
    const bool single = options.max_nodes == 1 && !options.master_port;
    endpoint_ = Endpoint{.host = options.master_addr, .port = options.master_port.value_or(kDefaultMasterPort)};
    if (single) {
      try_host("127.0.0.1", 0);
    } else if (options.node_rank == 0) {
      if (!try_host(wildcard_address_for(endpoint_.host), endpoint_.port)) {
        throw NetworkError("node rank 0 cannot serve the rendezvous on port " + std::to_string(endpoint_.port) +
                           ": the port is taken (pick another --master-port)");
      }
    }
  } else {
    endpoint_ = *options.rdzv_endpoint;
    const bool host = options.rdzv_conf.is_host.value_or(is_local_host(endpoint_.host));
    if (host && !try_host(wildcard_address_for(endpoint_.host), endpoint_.port)) {
      spdlog::info("rendezvous port {} is taken here: joining it as a client", endpoint_.port);
    }
  }
  if (run_id_.empty()) run_id_ = "none";
  connect();
}

NodeRendezvous::~NodeRendezvous() {
  client_.reset();
  if (server_) server_->stop();
}

bool NodeRendezvous::try_host(const std::string& bind_host, uint16_t port) {
  rendezvous::ServerOptions so;
  // --host narrows where it listens; a private daemon on loopback stays there.
  so.host = options_.hosted_bind.empty() || bind_host == "127.0.0.1" ? bind_host : options_.hosted_bind;
  so.allow = options_.hosted_allow;
  so.port = port;
  so.http_port = options_.rdzv_conf.http_port;
  so.join_token = options_.rdzv_conf.token;
  try {
    server_ = std::make_unique<rendezvous::Server>(so);
  } catch (const rendezvous::AddressInUseError& e) {
    // Another agent (or a separately started daemon) got the port first: join it as a client.
    spdlog::debug("not hosting the rendezvous: {}", e.what());
    return false;
  } catch (const NetworkError& e) {
    if (bind_host != "::") throw;
    // The endpoint's name has an IPv6 address but this kernel has no IPv6: IPv4 it is.
    spdlog::debug("cannot host on [::] ({}): hosting on 0.0.0.0", e.what());
    return try_host("0.0.0.0", port);
  }
  server_->start_background();
  const uint16_t bound = server_->port();
  if (bind_host == "127.0.0.1" || endpoint_.host.empty()) endpoint_ = Endpoint{.host = "127.0.0.1", .port = bound};
  endpoint_.port = bound;
  if (port == 0 && options_.max_nodes > 1) {
    // The port was left to the kernel: the other nodes cannot join unless they are told which one it is.
    spdlog::warn(
        "hosting the rendezvous on {} (port 0 was asked: the other nodes join with --rdzv-endpoint "
        "<this host>:{})",
        Endpoint{bind_host, bound}.to_string(), bound);
  } else {
    spdlog::info("hosting the rendezvous on {}", Endpoint{bind_host, bound}.to_string());
  }
  if (const auto http = server_->http_port()) {
    std::fprintf(stderr, "meshrun: live view of the job on http://%s:%u/ (--rdzv-conf http_port)\n",
                 bind_host == "0.0.0.0" || bind_host == "::" ? local_hostname().c_str() : bind_host.c_str(), *http);
  }
  return true;
}

bool NodeRendezvous::check_signals() {
  if (const int sig = signals_.drain_terminating()) interrupted_by_ = sig;
  return interrupted_by_ != 0;
}

void NodeRendezvous::connect() {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + from_seconds(options_.rdzv_conf.join_timeout_s);
  auto next_note = start + kProgressEvery;
  proto::ConnectOptions co;
  co.connect_timeout = 2s;
  co.op_timeout = from_seconds(options_.rdzv_conf.read_timeout_s);
  while (true) {
    try {
      client_.emplace(proto::StoreClient::connect(endpoint_, co));
      client_->authenticate(options_.rdzv_conf.token);  // a refusal (RemoteError) is final: no retry
      return;
    } catch (const NetworkError& e) {
      if (check_signals()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        throw TimeoutError("cannot reach the rendezvous at " + endpoint_.to_string() + " within the join timeout (" +
                           std::to_string(static_cast<int>(options_.rdzv_conf.join_timeout_s)) + " s): " + e.what() +
                           " (is the hosting node up? is the endpoint right?)");
      }
      if (now >= next_note) {
        std::fprintf(stderr, "meshrun: waiting for the rendezvous at %s (%s) \u2014 %.0f s of %.0f s\n",
                     endpoint_.to_string().c_str(), e.what(), to_seconds(now - start),
                     options_.rdzv_conf.join_timeout_s);
        next_note = now + kProgressEvery;
      }
      std::this_thread::sleep_for(200ms);
    }
  }
}

std::optional<proto::Assignment> NodeRendezvous::join() {
  if (!client_ || check_signals()) return std::nullopt;
  proto::JoinRequest req;
  req.run_id = run_id_;
  req.host = hostname_;
  // The address other nodes reach this one at: --local-addr, else this node's address on the route to the
  // rendezvous (an address: nobody needs DNS to find this node), else its host name.
  req.addr = !options_.local_addr.empty() ? options_.local_addr : own_address(endpoint_.host).value_or(hostname_);
  req.local_world_size = options_.nproc_per_node;
  req.min_nodes = options_.min_nodes;
  req.max_nodes = options_.max_nodes;
  req.straggler_threshold = options_.straggler_threshold;
  req.evict_suspects = options_.evict_suspects;
  req.slow_nodes = options_.slow_nodes;
  if (options_.backend == RdzvBackend::kStatic || options_.node_rank_given) req.requested_rank = options_.node_rank;
  req.last_call_timeout_s = options_.rdzv_conf.last_call_timeout_s;
  req.join_timeout_s = options_.rdzv_conf.join_timeout_s;
  req.keep_alive_timeout_s = options_.rdzv_conf.keep_alive_interval_s * options_.rdzv_conf.keep_alive_max_attempt;
  req.pid = ::getpid();
  node_id_ = client_->join(req);

  auto next_note = std::chrono::steady_clock::now() + kProgressEvery;
  bool told_spare = false;
  bool told_cooling = false;
  while (true) {
    const proto::AwaitReply reply = client_->await(run_id_, node_id_, kAwaitSlice);
    if (reply.status == proto::AwaitStatus::kAssigned) {
      proto::Assignment a = reply.assignment;
      if (a.master_addr.empty()) a.master_addr = endpoint_.host;
      return a;
    }
    if (reply.status == proto::AwaitStatus::kFinished) throw RunFinished(reply.reason);
    if (reply.status == proto::AwaitStatus::kFailed) {
      throw RemoteError("rendezvous for run '" + run_id_ + "' failed: " + reply.reason);
    }
    if (check_signals()) return std::nullopt;
    // A spare, or a node cooling down, says so once (it may wait for hours); a joiner reports its progress every
    // few seconds.
    const bool cooling = reply.cooldown_s > 0;
    const bool note = reply.spare ? !told_spare
                      : cooling   ? !told_cooling
                                  : std::chrono::steady_clock::now() >= next_note;
    if (reply.spare && !told_spare) became_spare();
    told_spare = reply.spare;
    told_cooling = cooling;
    if (note) {
      say(cooling ? cooling_down_line(reply.cooldown_s) : describe_waiting(reply));
      next_note = std::chrono::steady_clock::now() + kProgressEvery;
    }
  }
}

proto::HeartbeatReply NodeRendezvous::heartbeat(const std::vector<proto::RankProgress>& progress,
                                                const proto::AttemptMilestones& attempt) {
  const Duration bound = from_seconds(options_.rdzv_conf.keep_alive_interval_s);
  try {
    if (!beat_client_) {
      proto::ConnectOptions co;
      co.connect_timeout = bound;
      co.op_timeout = bound;
      beat_client_.emplace(proto::StoreClient::connect(endpoint_, co));
      beat_client_->authenticate(options_.rdzv_conf.token);
    }
    proto::ClockReading reading;  // shown in the daemon's status
    if (const auto known = clock_offset()) {
      reading =
          proto::ClockReading{.measured = true, .offset_s = known->offset_s, .uncertainty_s = known->uncertainty_s};
    }
    const int64_t sent = unix_time_ns();
    auto reply = beat_client_->heartbeat(run_id_, node_id_, progress, std::nullopt, reading, attempt);
    if (reply.server_unix_ns > 0) clock_.add(sent, reply.server_unix_ns, unix_time_ns());
    return reply;
  } catch (const RemoteError&) {
    throw;  // the daemon answered; the connection is fine
  } catch (const Error&) {
    beat_client_.reset();  // a timed-out exchange may leave half a reply on the socket: start afresh
    throw;
  }
}

std::optional<OffsetEstimate> NodeRendezvous::clock_offset() const {
  auto daemon_minus_ours = clock_.estimate();
  if (daemon_minus_ours) daemon_minus_ours->offset_s = -daemon_minus_ours->offset_s;
  return daemon_minus_ours;
}

void NodeRendezvous::report_failure(const std::string& reason, proto::RestartCause cause) {
  client_->report_failure(run_id_, node_id_, reason, cause);
}

void NodeRendezvous::record_failure(const proto::FailureReport& failure, const proto::AttemptMilestones& attempt) {
  if (!client_ || node_id_.empty()) return;
  try {
    client_->record_failure(run_id_, node_id_, failure, attempt);
  } catch (const Error& e) {
    spdlog::warn("could not report the failure to the rendezvous: {}", e.what());
  }
}

std::vector<proto::FailureReport> NodeRendezvous::failures() {
  if (!client_) return {};
  try {
    for (const auto& run : client_->status(run_id_).runs) {
      if (run.run_id == run_id_) return run.failures;
    }
  } catch (const Error& e) {
    spdlog::warn("could not read the run's failures from the rendezvous: {}", e.what());
  }
  return {};
}

std::optional<proto::GoodputReport> NodeRendezvous::leave(const std::string& reason, bool ok,
                                                          const proto::AttemptMilestones& attempt) {
  if (!client_ || node_id_.empty()) return std::nullopt;
  try {
    return client_->leave(run_id_, node_id_, reason, ok, attempt);
  } catch (const Error& e) {
    spdlog::warn("could not leave the rendezvous cleanly: {}", e.what());
    return std::nullopt;
  }
}

void NodeRendezvous::wait_for_other_nodes() {
  if (!server_ || !client_) return;
  auto next_note = std::chrono::steady_clock::now() + kProgressEvery;
  while (!check_signals()) {
    const proto::StatusReply status = client_->status(run_id_);
    bool running = false;
    for (const auto& run : status.runs) {
      const bool ended = run.state == proto::RunState::kFinished || run.state == proto::RunState::kFailed;
      if (run.run_id == run_id_ && !ended) running = true;
    }
    if (!running) return;
    if (std::chrono::steady_clock::now() >= next_note) {
      say("this node is done; still serving the rendezvous until the other nodes finish");
      next_note = std::chrono::steady_clock::now() + 10 * kProgressEvery;
    }
    std::this_thread::sleep_for(100ms);
  }
}

void NodeRendezvous::linger_for_others() {
  if (!server_) return;
  const auto until = std::chrono::steady_clock::now() + 2 * from_seconds(options_.rdzv_conf.keep_alive_interval_s);
  while (std::chrono::steady_clock::now() < until && !check_signals()) std::this_thread::sleep_for(50ms);
}

}  // namespace meshrun::launcher

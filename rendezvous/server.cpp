// The daemon: one io_context thread, an acceptor per store (the main port plus one private port per
// run), a Session per connection (session.cpp). All shared state (stores, membership, pending waits and
// awaits) is touched only from the io thread, so it needs no locks.
//
// NOTE on failure isolation: anything a client sends that cannot be decoded or handled closes that
// client's connection with a logged reason; no exception escapes a handler into io_context::run().
#include "rendezvous/server.hpp"

#include <chrono>
#include <list>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "rendezvous/session.hpp"  // first Asio include (it orders <utility> before Asio)

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/version.hpp"
#include "rendezvous/cidr.hpp"
#include "rendezvous/membership.hpp"

namespace meshrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;

namespace {
constexpr auto kTickInterval = std::chrono::milliseconds(50);
constexpr double kMaxAwaitSeconds = 30.0;

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

/// A client blocked in a meshrun "await" until its round settles or its deadline passes.
struct PendingAwait {
  std::weak_ptr<Session> session;
  std::string run_id;
  std::string node_id;
  TimePoint deadline;
};

class Server::Impl final : public SessionHost {
 public:
  explicit Impl(const ServerOptions& options);
  void run(bool handle_signals);
  void start_background();
  void stop();
  uint16_t port() const { return port_; }

  // --- SessionHost: called by sessions, on the io thread ---
  void wake(const std::vector<WaitId>& ids) override;
  WaitId register_wait(const std::shared_ptr<Session>& session) override;
  void forget_wait(WaitId id) override { waits_.erase(id); }
  std::optional<json> handle_meshrun(const std::shared_ptr<Session>& session, const json& request) override;
  void on_closed(const std::shared_ptr<Session>& session) override;
  const proto::Limits& limits() const override { return options_.limits; }

 private:
  void bind(Listener& listener, const std::string& host, uint16_t port);
  void accept(const std::shared_ptr<Listener>& listener);
  void schedule_tick();
  void check_awaits(bool include_deadlines);
  void reap_finished_runs();
  std::shared_ptr<Listener> run_listener(const std::string& run_id);
  json await_reply(const std::shared_ptr<Session>& session, const std::string& run_id, const std::string& node_id);
  json status(const std::string& run_id) const;

  ServerOptions options_;
  std::vector<Cidr> allow_;
  asio::io_context io_{1};  // concurrency hint: exactly one thread runs it
  SteadyClock clock_;
  Membership membership_{clock_};
  std::shared_ptr<Listener> main_;
  std::map<std::string, std::shared_ptr<Listener>> run_listeners_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::unordered_map<WaitId, std::weak_ptr<Session>> waits_;
  WaitId next_wait_id_ = 1;
  std::list<PendingAwait> awaits_;
  uint64_t seen_version_ = 0;
  asio::steady_timer tick_timer_{io_};
  asio::signal_set signals_{io_};
  std::thread thread_;
  uint16_t port_ = 0;
  TimePoint started_ = clock_.now();
};

// ----------------------------------------------------------------------------------------------

Server::Impl::Impl(const ServerOptions& options) : options_(options) {
  for (const auto& rule : options.allow) allow_.push_back(Cidr::parse(rule));
  main_ = std::make_shared<Listener>(io_, "");
  bind(*main_, options.host, options.port);
  port_ = main_->acceptor.local_endpoint().port();
  accept(main_);
  schedule_tick();
}

void Server::Impl::bind(Listener& listener, const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw UsageError("cannot resolve listen address '" + host + "': " + ec.message() +
                     " (use an IP address such as 0.0.0.0 or 127.0.0.1)");
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  listener.acceptor.open(ep.protocol());
  listener.acceptor.set_option(tcp::acceptor::reuse_address(true));
  listener.acceptor.bind(ep, ec);
  // With SO_REUSEADDR two processes may both bind the port; the second then fails in listen().
  if (!ec) listener.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string fix =
        ec == asio::error::address_in_use
            ? " (another process uses this port: pick another with --port, or --port 0 for a free one)"
            : "";
    const std::string message = "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message() + fix;
    if (ec == asio::error::address_in_use) throw AddressInUseError(message);
    throw NetworkError(message);
  }
}

void Server::Impl::accept(const std::shared_ptr<Listener>& listener) {
  listener->acceptor.async_accept([this, listener](boost::system::error_code ec, tcp::socket socket) {
    if (!listener->acceptor.is_open()) return;
    if (!ec) {
      boost::system::error_code peer_ec;
      const auto remote = socket.remote_endpoint(peer_ec);
      const bool ok = !peer_ec && allowed(allow_, address_text(remote.address()));
      auto session = std::make_shared<Session>(std::move(socket), *this, listener, ok);
      sessions_.insert(session);
      session->start();
    } else if (ec != asio::error::operation_aborted) {
      spdlog::warn("accept failed: {}", ec.message());
    }
    accept(listener);
  });
}

void Server::Impl::schedule_tick() {
  tick_timer_.expires_after(kTickInterval);
  tick_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    membership_.tick();
    reap_finished_runs();
    check_awaits(true);
    schedule_tick();
  });
}

WaitId Server::Impl::register_wait(const std::shared_ptr<Session>& session) {
  const WaitId id = next_wait_id_++;
  waits_[id] = session;
  return id;
}

void Server::Impl::wake(const std::vector<WaitId>& ids) {
  for (WaitId id : ids) {
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    auto session = it->second.lock();
    waits_.erase(it);
    if (session) session->wake();
  }
}

void Server::Impl::on_closed(const std::shared_ptr<Session>& session) { sessions_.erase(session); }

std::shared_ptr<Listener> Server::Impl::run_listener(const std::string& run_id) {
  auto it = run_listeners_.find(run_id);
  if (it != run_listeners_.end()) return it->second;
  auto listener = std::make_shared<Listener>(io_, run_id);
  bind(*listener, options_.host, 0);
  accept(listener);
  run_listeners_[run_id] = listener;
  membership_.set_master_port(run_id, listener->acceptor.local_endpoint().port());
  spdlog::info("run '{}': workers' store on port {}", run_id, listener->acceptor.local_endpoint().port());
  return listener;
}

void Server::Impl::reap_finished_runs() {
  for (const auto& run_id : membership_.take_finished_runs()) {
    auto it = run_listeners_.find(run_id);
    if (it == run_listeners_.end()) continue;
    boost::system::error_code ec;
    it->second->acceptor.close(ec);
    run_listeners_.erase(it);
    spdlog::info("run '{}' finished: its store port is closed", run_id);
  }
}

json Server::Impl::await_reply(const std::shared_ptr<Session>& session, const std::string& run_id,
                               const std::string& node_id) {
  auto reply = membership_.poll(run_id, node_id);
  if (reply.status == "assigned" && reply.assignment.master_addr.empty()) {
    // The address this agent reached us at is one its workers can reach too.
    reply.assignment.master_addr = session->local_addr();
  }
  if (reply.status == "failed") spdlog::warn("run '{}': {}", run_id, reply.reason);
  return reply;
}

void Server::Impl::check_awaits(bool include_deadlines) {
  const bool changed = membership_.version() != seen_version_;
  if (!changed && !include_deadlines) return;
  seen_version_ = membership_.version();
  const auto now = clock_.now();
  for (auto it = awaits_.begin(); it != awaits_.end();) {
    auto session = it->session.lock();
    if (!session || !session->awaiting()) {
      membership_.set_awaiting(it->run_id, it->node_id, false);
      it = awaits_.erase(it);
      continue;
    }
    const bool due = include_deadlines && now >= it->deadline;
    if ((changed && membership_.settled(it->run_id, it->node_id)) || due) {
      membership_.set_awaiting(it->run_id, it->node_id, false);
      const json reply = await_reply(session, it->run_id, it->node_id);
      it = awaits_.erase(it);
      session->finish_await(reply);
    } else {
      ++it;
    }
  }
}

json Server::Impl::status(const std::string& run_id) const {
  proto::StatusReply reply;
  reply.server = proto::kServerName;
  reply.version = kVersion;
  reply.uptime_s = to_seconds(clock_.now() - started_);
  reply.keys = static_cast<int64_t>(main_->store.size());
  reply.connections = static_cast<int>(sessions_.size());
  reply.runs = membership_.status(run_id);
  for (auto& run : reply.runs) {
    if (auto it = run_listeners_.find(run.run_id); it != run_listeners_.end()) {
      run.keys = static_cast<int64_t>(it->second->store.size());
    }
  }
  return reply;
}

std::optional<json> Server::Impl::handle_meshrun(const std::shared_ptr<Session>& session, const json& request) {
  const std::string op = request.value("op", std::string());
  std::optional<json> reply;
  try {
    if (op == "hello") {
      reply = proto::Hello{
          .server = proto::kServerName, .version = kVersion, .unix_time_ms = unix_time_ms(), .peer = session->peer()};
    } else if (op == "join") {
      const auto join = request.get<proto::JoinRequest>();
      const std::string node_id = membership_.join(join);
      run_listener(join.run_id);
      spdlog::info("run '{}': {} (pid {}, {} workers) joined as {}", join.run_id, join.host, join.pid,
                   join.local_world_size, node_id);
      reply = json{{"node_id", node_id}, {"round", 0}};
    } else if (op == "await") {
      const auto run_id = request.at("run_id").get<std::string>();
      const auto node_id = request.at("node_id").get<std::string>();
      const double timeout_s = std::clamp(request.value("timeout_s", 5.0), 0.0, kMaxAwaitSeconds);
      if (membership_.settled(run_id, node_id) || timeout_s <= 0) {
        reply = await_reply(session, run_id, node_id);
      } else {
        membership_.set_awaiting(run_id, node_id, true);
        awaits_.push_back({session, run_id, node_id, clock_.now() + from_seconds(timeout_s)});
      }
    } else if (op == "heartbeat") {
      reply = membership_.heartbeat(request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>());
    } else if (op == "fail") {
      membership_.report_failure(request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>(),
                                 request.value("reason", std::string("unknown")));
      reply = json::object();
    } else if (op == "leave") {
      membership_.leave(request.at("run_id").get<std::string>(), request.at("node_id").get<std::string>(),
                        request.value("reason", std::string()), request.value("ok", false));
      reap_finished_runs();
      reply = json::object();
    } else if (op == "status") {
      reply = status(request.value("run_id", std::string()));
    } else {
      reply = json{{"error", "unknown meshrun op '" + op + "' (this daemon is meshrun " + std::string(kVersion) + ")"}};
    }
  } catch (const RemoteError& e) {
    spdlog::warn("{} from {} refused: {}", op, session->peer(), e.what());
    reply = json{{"error", e.what()}};
  } catch (const json::exception& e) {
    reply = json{{"error", "malformed '" + op + "' request: " + e.what()}};
  }
  check_awaits(false);
  return reply;
}

void Server::Impl::run(bool handle_signals) {
  if (handle_signals) {
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    signals_.async_wait([this](boost::system::error_code ec, int signo) {
      if (ec) return;
      spdlog::info("received {}: shutting down", signo == SIGINT ? "SIGINT" : "SIGTERM");
      stop();
    });
  }
  io_.run();
}

void Server::Impl::start_background() {
  thread_ = std::thread([this] { io_.run(); });
}

void Server::Impl::stop() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    main_->acceptor.close(ec);
    for (auto& [id, listener] : run_listeners_) listener->acceptor.close(ec);
    tick_timer_.cancel();
    signals_.cancel(ec);
    auto sessions = sessions_;
    for (const auto& s : sessions) s->close("");
    io_.stop();
  });
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Server::~Server() { impl_->stop(); }
uint16_t Server::port() const { return impl_->port(); }
void Server::run(bool handle_signals) { impl_->run(handle_signals); }
void Server::start_background() { impl_->start_background(); }
void Server::stop() { impl_->stop(); }

}  // namespace meshrun::rendezvous

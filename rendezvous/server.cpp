// The daemon: one io_context thread, an acceptor per store (the main port plus one private port per
// run), a Session per connection. All shared state (stores, membership, pending waits and awaits) is
// touched only from the io thread, so it needs no locks.
//
// NOTE on failure isolation: anything a client sends that cannot be decoded or handled closes that
// client's connection with a logged reason; no exception escapes a handler into io_context::run().
#include "rendezvous/server.hpp"

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/version.hpp"
#include "proto/byte_codec.hpp"
#include "proto/request.hpp"
#include "rendezvous/cidr.hpp"
#include "rendezvous/kv_store.hpp"
#include "rendezvous/membership.hpp"

namespace meshrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;
using proto::QueryType;

namespace {
constexpr auto kTickInterval = std::chrono::milliseconds(50);
constexpr double kMaxAwaitSeconds = 30.0;
constexpr size_t kReadChunk = 16 * 1024;

std::string address_text(const asio::ip::address& addr) {
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6()).to_string();
  }
  return addr.to_string();
}

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

class Session;

/// One listening port and the store behind it.
struct Listener {
  Listener(asio::io_context& io, std::string run) : acceptor(io), run_id(std::move(run)) {}
  tcp::acceptor acceptor;
  KvStore store;
  std::string run_id;  // empty for the main port
};

/// A client blocked in a meshrun "await" until its round settles or its deadline passes.
struct PendingAwait {
  std::weak_ptr<Session> session;
  std::string run_id;
  std::string node_id;
  TimePoint deadline;
};

class Server::Impl {
 public:
  explicit Impl(const ServerOptions& options);
  void run(bool handle_signals);
  void start_background();
  void stop();
  uint16_t port() const { return port_; }

  // --- called by sessions, on the io thread ---
  void wake(const std::vector<WaitId>& ids);
  WaitId register_wait(const std::shared_ptr<Session>& session);
  void forget_wait(WaitId id) { waits_.erase(id); }
  /// Handles one meshrun JSON request; nullopt means the reply comes later (await).
  std::optional<json> handle_meshrun(const std::shared_ptr<Session>& session, const json& request);
  void on_closed(const std::shared_ptr<Session>& session);
  const proto::Limits& limits() const { return options_.limits; }
  asio::io_context& io() { return io_; }

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
// Session: one client connection. Reads requests in order; a WAIT/GET on missing keys or an await
// blocks the session (later requests stay buffered) until it is satisfied or cancelled.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server, std::shared_ptr<Listener> listener, bool allowed)
      : socket_(std::move(socket)), server_(server), listener_(std::move(listener)), allowed_(allowed) {
    boost::system::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? "?" : address_text(remote.address()) + ":" + std::to_string(remote.port());
    const auto local = socket_.local_endpoint(ec);
    local_addr_ = ec ? "" : address_text(local.address());
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.non_blocking(true, ec);  // replies are written directly when the socket takes them
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() { do_read(); }
  const std::string& peer() const { return peer_; }
  const std::string& local_addr() const { return local_addr_; }
  KvStore& store() { return listener_->store; }

  void close(const std::string& reason) {
    if (closed_) return;
    closed_ = true;
    if (!reason.empty()) spdlog::warn("closing connection from {}: {}", peer_, reason);
    if (blocked_ == Blocked::kWait) {
      listener_->store.cancel_wait(wait_id_);
      server_.forget_wait(wait_id_);
    }
    boost::system::error_code ec;
    if (!pending_.empty()) socket_.write_some(asio::buffer(pending_), ec);  // best effort: a last error reply
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    server_.on_closed(shared_from_this());
  }

  /// The keys of the pending wait exist now.
  void wake() {
    if (closed_ || blocked_ != Blocked::kWait) return;
    blocked_ = Blocked::kNone;
    server_.forget_wait(wait_id_);
    auto ready = std::move(on_ready_);
    on_ready_ = nullptr;
    guarded([&] { ready(); });
    process();
    flush();
  }

  /// The pending await has its answer.
  void finish_await(const json& reply) {
    if (closed_ || blocked_ != Blocked::kAwait) return;
    blocked_ = Blocked::kNone;
    send_string(reply.dump());
    process();
    flush();
  }

  bool awaiting() const { return blocked_ == Blocked::kAwait; }

 private:
  enum class Blocked { kNone, kWait, kAwait };

  void do_read() {
    auto self = shared_from_this();
    socket_.async_read_some(asio::buffer(chunk_), [this, self](boost::system::error_code ec, size_t n) {
      if (closed_) return;
      if (ec) {
        close(ec == asio::error::eof || ec == asio::error::connection_reset ? "" : "read: " + ec.message());
        return;
      }
      in_.append(chunk_.data(), n);
      // A client may pipeline while blocked, but not without bound.
      if (in_.size() > server_.limits().max_value_bytes + 2 * server_.limits().max_key_bytes + 4096) {
        close("too many bytes buffered while a request is pending");
        return;
      }
      process();
      flush();
      if (!closed_) do_read();
    });
  }

  void process() {
    while (!closed_ && !in_.empty()) {
      proto::Request request;
      const auto result = proto::decode_request(in_, server_.limits(), request);
      if (result.status == proto::DecodeStatus::kNeedMore) return;
      if (result.status == proto::DecodeStatus::kMalformed) {
        close("malformed request: " + result.error);
        return;
      }
      if (blocked_ != Blocked::kNone) {
        // Only CANCEL_WAIT may overtake a pending wait; everything else waits its turn.
        if (blocked_ == Blocked::kWait && request.type == QueryType::kCancelWait) {
          in_.erase(0, result.consumed);
          listener_->store.cancel_wait(wait_id_);
          server_.forget_wait(wait_id_);
          on_ready_ = nullptr;
          blocked_ = Blocked::kNone;
          send_u8(static_cast<uint8_t>(proto::WaitResponse::kWaitCanceled));
          continue;
        }
        return;
      }
      in_.erase(0, result.consumed);
      SPDLOG_TRACE("{} {}", peer_, proto::query_name(static_cast<uint8_t>(request.type)));
      if (!guarded([&] { handle(request); })) return;
    }
  }

  /// Runs `fn`; an exception closes this session only.
  template <typename Fn>
  bool guarded(Fn&& fn) {
    try {
      fn();
      return !closed_;
    } catch (const std::exception& e) {
      close(std::string("request failed: ") + e.what());
      return false;
    }
  }

  void handle(const proto::Request& r) {
    if (!allowed_) {
      // Rejected peers get a readable answer only if they speak meshrun; anything else is dropped.
      if (r.type == QueryType::kValidate) return;
      if (r.type == QueryType::kPing) {  // answered, so a diagnosing client can tell "rejected" from "dead"
        proto::ByteWriter w;
        w.put_u32(static_cast<uint32_t>(r.number));
        send(w.take());
        return;
      }
      if (r.type == QueryType::kMeshrun) {
        send_string(json{{"error", "peer " + peer_ + " is not allowed to use this daemon (see its --allow rules)"}}.dump());
      }
      close("peer not allowed by --allow");
      return;
    }
    KvStore& store = listener_->store;
    switch (r.type) {
      case QueryType::kValidate:
        if (static_cast<uint32_t>(r.number) != proto::kValidationMagic) close("bad validation magic: not a TCPStore client");
        return;
      case QueryType::kPing: {
        proto::ByteWriter w;
        w.put_u32(static_cast<uint32_t>(r.number));
        send(w.take());
        return;
      }
      case QueryType::kSet:
        server_.wake(store.set(r.keys[0], r.values[0]));
        return;
      case QueryType::kCompareSet: {
        std::vector<WaitId> woken;
        send_string(store.compare_set(r.keys[0], r.values[0], r.values[1], woken));
        server_.wake(woken);
        return;
      }
      case QueryType::kGet:
        // Clients WAIT before GET; a raw GET of a missing key gets "" (as PyTorch's libuv server does).
        send_string(store.get(r.keys[0]).value_or(std::string()));
        return;
      case QueryType::kAdd: {
        std::vector<WaitId> woken;
        const int64_t value = store.add(r.keys[0], r.number, woken);
        proto::ByteWriter w;
        w.put_i64(value);
        send(w.take());
        server_.wake(woken);
        return;
      }
      case QueryType::kCheck: {
        bool ready = true;
        for (const auto& k : r.keys) ready = ready && store.contains(k);
        send_u8(static_cast<uint8_t>(ready ? proto::CheckResponse::kReady : proto::CheckResponse::kNotReady));
        return;
      }
      case QueryType::kWait:
        block_until(r.keys, [this] { send_u8(static_cast<uint8_t>(proto::WaitResponse::kStopWaiting)); });
        return;
      case QueryType::kGetNumKeys: {
        proto::ByteWriter w;
        w.put_i64(static_cast<int64_t>(store.size()));
        send(w.take());
        return;
      }
      case QueryType::kDeleteKey: {
        proto::ByteWriter w;
        w.put_i64(store.erase(r.keys[0]) ? 1 : 0);
        send(w.take());
        return;
      }
      case QueryType::kAppend:
        server_.wake(store.append(r.keys[0], r.values[0]));
        return;
      case QueryType::kMultiGet: {
        proto::ByteWriter w;
        for (const auto& k : r.keys) w.put_string(store.get(k).value_or(std::string()));
        send(w.take());
        return;
      }
      case QueryType::kMultiSet: {
        std::vector<WaitId> woken;
        for (size_t i = 0; i < r.keys.size(); ++i) {
          auto ids = store.set(r.keys[i], r.values[i]);
          woken.insert(woken.end(), ids.begin(), ids.end());
        }
        server_.wake(woken);
        return;
      }
      case QueryType::kCancelWait:
        send_u8(static_cast<uint8_t>(proto::WaitResponse::kWaitCanceled));
        return;
      case QueryType::kQueuePush:
        server_.wake(store.queue_push(r.keys[0], r.values[0]));
        return;
      case QueryType::kQueuePop: {
        proto::ByteWriter w;
        w.put_i64(store.queue_len(r.keys[0]));
        if (auto value = store.queue_pop(r.keys[0])) w.put_string(*value);
        send(w.take());
        return;
      }
      case QueryType::kQueueLen: {
        proto::ByteWriter w;
        w.put_i64(store.queue_len(r.keys[0]));
        send(w.take());
        return;
      }
      case QueryType::kListKeys: {
        const auto keys = store.keys();
        proto::ByteWriter w;
        w.put_u64(keys.size());
        for (const auto& k : keys) w.put_string(k);
        send(w.take());
        return;
      }
      case QueryType::kBarrier: {
        // The count lives in the key itself; the last arrival releases everyone parked on it.
        std::vector<WaitId> woken;
        const WaitId id = server_.register_wait(shared_from_this());
        if (store.barrier(r.keys[0], r.number, id, woken)) {
          server_.forget_wait(id);
          send_u8(static_cast<uint8_t>(proto::WaitResponse::kStopWaiting));
        } else {
          wait_id_ = id;
          on_ready_ = [this] { send_u8(static_cast<uint8_t>(proto::WaitResponse::kStopWaiting)); };
          blocked_ = Blocked::kWait;
        }
        server_.wake(woken);
        return;
      }
      case QueryType::kMeshrun: {
        auto request = json::parse(r.values[0], nullptr, false);
        if (request.is_discarded() || !request.is_object()) {
          close("meshrun request is not a JSON object");
          return;
        }
        auto reply = server_.handle_meshrun(shared_from_this(), request);
        if (reply) {
          send_string(reply->dump());
        } else {
          blocked_ = Blocked::kAwait;
        }
        return;
      }
    }
  }

  void block_until(const std::vector<std::string>& keys, std::function<void()> on_ready) {
    const WaitId id = server_.register_wait(shared_from_this());
    if (listener_->store.add_wait(id, keys)) {
      server_.forget_wait(id);
      on_ready();
      return;
    }
    wait_id_ = id;
    on_ready_ = std::move(on_ready);
    blocked_ = Blocked::kWait;
  }

  void send_u8(uint8_t v) { send(std::string(1, static_cast<char>(v))); }
  void send_string(const std::string& s) {
    proto::ByteWriter w;
    w.put_string(s);
    send(w.take());
  }
  /// Replies are gathered while a batch of requests is processed and written once by flush().
  void send(const std::string& bytes) { pending_.append(bytes); }

  void flush() {
    if (closed_ || pending_.empty()) return;
    if (writing_) {
      out_.push_back(std::move(pending_));
      pending_.clear();
      return;
    }
    // Fast path: one non-blocking write, no completion handler; the rest (if any) goes async.
    boost::system::error_code ec;
    const size_t n = socket_.write_some(asio::buffer(pending_), ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
      close("write: " + ec.message());
      return;
    }
    if (n == pending_.size()) {
      pending_.clear();
      return;
    }
    out_.push_back(pending_.substr(n));
    pending_.clear();
    do_write();
  }

  void do_write() {
    writing_ = true;
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(out_.front()), [this, self](boost::system::error_code ec, size_t) {
      if (closed_) return;
      if (ec) {
        close("write: " + ec.message());
        return;
      }
      out_.pop_front();
      if (out_.empty()) {
        writing_ = false;
      } else {
        do_write();
      }
    });
  }

  tcp::socket socket_;
  Server::Impl& server_;
  std::shared_ptr<Listener> listener_;
  bool allowed_;
  std::string peer_;
  std::string local_addr_;
  std::string in_;
  std::array<char, kReadChunk> chunk_{};
  std::string pending_;             // replies not yet handed to the socket
  std::deque<std::string> out_;     // replies the socket did not take yet (async write in flight)
  bool writing_ = false;
  bool closed_ = false;
  Blocked blocked_ = Blocked::kNone;
  WaitId wait_id_ = 0;
  std::function<void()> on_ready_;
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
    const std::string fix = ec == asio::error::address_in_use
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
      reply = proto::Hello{.server = proto::kServerName, .version = kVersion, .unix_time_ms = unix_time_ms(),
                           .peer = session->peer()};
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

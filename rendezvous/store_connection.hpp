// StoreConnection: one client of the daemon, with no socket. Bytes come in (receive), replies go out through
// the transport that carries them (ConnectionTransport: the Asio Session today, any other transport tomorrow;
// the unit tests and the fuzzer drive it directly). Requests are answered in order; a WAIT on missing keys, a
// BARRIER or a rendezvous await parks the connection (later requests stay buffered) until the host wakes it or
// it is cancelled. A client that does not read its replies is not read any further until it does. Failures
// close this connection only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/store/request.hpp"
#include "proto/store/tcpstore_protocol.hpp"
#include "rendezvous/kv_store.hpp"

namespace meshrun::rendezvous {

class StoreConnection;

/// What a connection needs from the daemon that owns it (StoreServer: the state shared between connections).
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  /// Wakes the connections whose waits are satisfied.
  virtual void wake(const std::vector<WaitId>& ids) = 0;
  /// A parked wait of the connection on `keys` keys; kNoWait when its address already waits on as many as it
  /// may (Limits::max_waited_keys_per_peer).
  virtual WaitId register_wait(const std::shared_ptr<StoreConnection>& connection, size_t keys) = 0;
  virtual void forget_wait(WaitId id) = 0;
  /// Handles one meshrun JSON request; nullopt means the reply comes later (finish_await).
  virtual std::optional<nlohmann::json> handle_meshrun(const std::shared_ptr<StoreConnection>& connection,
                                                       const nlohmann::json& request) = 0;
  virtual void on_closed(const std::shared_ptr<StoreConnection>& connection) = 0;
  virtual const proto::Limits& limits() const = 0;
};

/// What carries a connection's bytes (a socket, for the daemon).
class ConnectionTransport {
 public:
  virtual ~ConnectionTransport() = default;
  /// Takes the replies in `replies` (the transport empties it): sent now or queued.
  virtual void deliver(std::string& replies) = 0;
  /// Reply bytes taken but not yet sent: with those not yet delivered, the client's backlog.
  virtual size_t unsent_bytes() const = 0;
  /// Ends the connection; `last` (possibly empty) is sent first if the transport can without waiting.
  virtual void hang_up(const std::string& last) = 0;
};

/// Who the client is, as the transport sees it.
struct ConnectionPeer {
  std::string endpoint;    // "ip:port" ("[v6]:port"): for messages
  std::string address;     // the address alone: what the per-address limits count
  std::string local_addr;  // the address the client reached us at (its workers' MASTER_ADDR)
};

class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  /// `store`: the key space of the port the client reached (shared: a run's port may close before its clients).
  /// `allowed`: whether --allow admits the client; one it does not gets a readable refusal, nothing else.
  StoreConnection(ConnectionHost& host, ConnectionTransport& transport, std::shared_ptr<KvStore> store,
                  ConnectionPeer peer, bool allowed);
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  /// Bytes from the client: buffered, and every whole request the client's backlog allows is answered.
  void receive(std::string_view bytes);
  /// The transport sent what held the client back: buffered requests are answered again.
  void resume() { pump(); }
  /// Whether more bytes may be read for it now (not closed, replies not backlogged).
  bool wants_input() const { return !closed_ && !backlogged(); }
  /// Closes the connection; a non-empty reason is logged.
  void close(const std::string& reason);
  bool closed() const { return closed_; }
  /// The keys of the pending wait exist now.
  void wake();
  /// The pending await has its answer.
  void finish_await(const nlohmann::json& reply);
  bool awaiting() const { return blocked_ == Blocked::kAwait; }

  const std::string& peer() const { return peer_.endpoint; }
  const std::string& peer_address() const { return peer_.address; }
  const std::string& local_addr() const { return peer_.local_addr; }
  /// The join token's challenge on this connection (proto/rendezvous/join_auth.hpp): the nonce handed out, and
  /// whether the connection proved it knows the token. Touched by the rendezvous service only.
  struct JoinAuth {
    std::string nonce;
    bool proven = false;
  };
  JoinAuth& join_auth() { return join_auth_; }

 private:
  enum class Blocked { kNone, kWait, kAwait };

  /// Handles the buffered requests; true when it stopped because the client's replies are backlogged.
  bool process();
  /// process() and deliver the replies until the buffered requests are handled or wait for the backlog.
  void pump();
  template <typename Fn>
  bool guarded(Fn&& fn);
  void handle(const proto::Request& r);
  void handle_store(const proto::Request& r);
  void handle_barrier(const proto::Request& r);
  void handle_meshrun(const proto::Request& r);
  void handle_rejected(const proto::Request& r);
  void block_until(const std::vector<std::string>& keys, std::function<void()> on_ready);
  /// Closes the connection whose wait on `keys` keys its address may not park (ConnectionHost::register_wait).
  void close_over_wait_cap(size_t keys);
  void send(const std::string& bytes) { pending_.append(bytes); }
  size_t reply_backlog() const { return pending_.size() + transport_.unsent_bytes(); }
  bool backlogged() const { return reply_backlog() > host_.limits().max_reply_backlog_bytes; }

  ConnectionHost& host_;
  ConnectionTransport& transport_;
  std::shared_ptr<KvStore> store_;
  ConnectionPeer peer_;
  bool allowed_;
  std::string in_;
  std::string pending_;  // replies not yet delivered to the transport
  bool closed_ = false;
  Blocked blocked_ = Blocked::kNone;
  WaitId wait_id_ = kNoWait;
  std::function<void()> on_ready_;
  JoinAuth join_auth_;
};

}  // namespace meshrun::rendezvous

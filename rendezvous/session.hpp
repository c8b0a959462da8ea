// Session: one client connection of the daemon. Reads requests in order and answers them; a WAIT on
// missing keys, a BARRIER or a rendezvous await parks the session (later requests stay buffered) until it
// is satisfied or cancelled. Failures close this session only.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <array>
#include <boost/asio.hpp>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/request.hpp"
#include "rendezvous/listener.hpp"

namespace meshrun::rendezvous {

class Session;

/// What a session needs from the network layer that owns it (StoreServer: the shared state lives there).
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  /// Wakes the sessions whose waits are satisfied.
  virtual void wake(const std::vector<WaitId>& ids) = 0;
  /// A parked wait of the session on `keys` keys; kNoWait when its address already waits on as many as it
  /// may (Limits::max_waited_keys_per_peer).
  virtual WaitId register_wait(const std::shared_ptr<Session>& session, size_t keys) = 0;
  virtual void forget_wait(WaitId id) = 0;
  /// Handles one meshrun JSON request; nullopt means the reply comes later (await).
  virtual std::optional<nlohmann::json> handle_meshrun(const std::shared_ptr<Session>& session,
                                                       const nlohmann::json& request) = 0;
  virtual void on_closed(const std::shared_ptr<Session>& session) = 0;
  virtual const proto::Limits& limits() const = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, SessionHost& host, std::shared_ptr<Listener> listener, bool allowed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() { do_read(); }
  /// "ip:port" of the client.
  const std::string& peer() const { return peer_; }
  /// The client's address alone (what the per-address limits count).
  const std::string& peer_address() const { return peer_address_; }
  /// The local address the client reached us at (what its workers should use as MASTER_ADDR).
  const std::string& local_addr() const { return local_addr_; }
  /// Closes the connection; a non-empty reason is logged.
  void close(const std::string& reason);
  /// The keys of the pending wait exist now.
  void wake();
  /// The pending await has its answer.
  void finish_await(const nlohmann::json& reply);
  bool awaiting() const { return blocked_ == Blocked::kAwait; }
  /// The join token's challenge on this connection (proto/join_auth.hpp): the nonce handed out, and
  /// whether the connection proved it knows the token. Touched by the rendezvous service only.
  struct JoinAuth {
    std::string nonce;
    bool proven = false;
  };
  JoinAuth& join_auth() { return join_auth_; }

 private:
  enum class Blocked { kNone, kWait, kAwait };

  void do_read();
  /// Handles the buffered requests; true when it stopped because the client's replies are backlogged.
  bool process();
  /// process() and flush() until the buffered requests are handled or wait for the backlog to drain.
  void pump();
  template <typename Fn>
  bool guarded(Fn&& fn);
  void handle(const proto::Request& r);
  void handle_store(const proto::Request& r);
  void handle_barrier(const proto::Request& r);
  void handle_meshrun(const proto::Request& r);
  void handle_rejected(const proto::Request& r);
  void block_until(const std::vector<std::string>& keys, std::function<void()> on_ready);
  /// Closes the connection whose wait on `keys` keys its address may not park (SessionHost::register_wait).
  void close_over_wait_cap(size_t keys);
  void send(const std::string& bytes) { pending_.append(bytes); }
  /// Reply bytes queued for this client: pending_ plus what the socket has not taken yet.
  size_t reply_backlog() const { return pending_.size() + out_bytes_; }
  bool backlogged() const { return reply_backlog() > host_.limits().max_reply_backlog_bytes; }
  void flush();
  void do_write();

  boost::asio::ip::tcp::socket socket_;
  SessionHost& host_;
  std::shared_ptr<Listener> listener_;
  bool allowed_;
  std::string peer_;
  std::string peer_address_;
  std::string local_addr_;
  std::string in_;
  // Reads land in small_: requests are mostly tens of bytes, and tens of thousands of idle connections
  // must stay cheap (no per-connection 16 KiB buffer). A read that fills small_ means a large request is
  // arriving: the next reads use large_ (kLargeRead bytes), dropped again once a read fits in small_.
  // Neither is zero-filled: only the bytes a read returns are used.
  static constexpr size_t kLargeRead = 64 * 1024;
  std::array<char, 512> small_;
  std::unique_ptr<char[]> large_;
  std::string pending_;  // replies not yet handed to the socket
  // Replies the socket did not take yet (async write in flight). A list, not a deque: libstdc++'s deque
  // allocates ~600 bytes even when empty, and nearly every connection's queue stays empty.
  std::list<std::string> out_;
  size_t out_bytes_ = 0;  // bytes in out_
  bool writing_ = false;
  bool reading_ = false;  // an async read is in flight (none while the client's replies are backlogged)
  bool closed_ = false;
  Blocked blocked_ = Blocked::kNone;
  WaitId wait_id_ = 0;
  std::function<void()> on_ready_;
  JoinAuth join_auth_;
};

}  // namespace meshrun::rendezvous

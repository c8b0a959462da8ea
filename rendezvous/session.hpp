// Session: the Asio transport of one client connection: it reads the socket into its StoreConnection (the
// store protocol, store_connection.hpp) and writes the connection's replies, directly when the socket takes
// them and asynchronously when it does not. It stops reading a client whose replies are backlogged and
// resumes once they drain.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <array>
#include <boost/asio.hpp>
#include <list>
#include <memory>
#include <string>

#include "rendezvous/listener.hpp"
#include "rendezvous/store_connection.hpp"

namespace meshrun::rendezvous {

class Session final : public ConnectionTransport, public std::enable_shared_from_this<Session> {
 public:
  /// A connection on `socket` to `listener`'s store, its protocol's events going to `host`.
  Session(boost::asio::ip::tcp::socket socket, ConnectionHost& host, const std::shared_ptr<Listener>& listener,
          bool allowed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() { do_read(); }
  const std::shared_ptr<StoreConnection>& connection() const { return connection_; }

  // --- ConnectionTransport ---
  void deliver(std::string& replies) override;
  size_t unsent_bytes() const override { return out_bytes_; }
  void hang_up(const std::string& last) override;

 private:
  void do_read();
  void do_write();

  boost::asio::ip::tcp::socket socket_;
  std::shared_ptr<StoreConnection> connection_;
  // Reads land in small_: requests are mostly tens of bytes, and tens of thousands of idle connections
  // must stay cheap (no per-connection 16 KiB buffer). A read that fills small_ means a large request is
  // arriving: the next reads use large_ (kLargeRead bytes), dropped again once a read fits in small_.
  // Neither is zero-filled: only the bytes a read returns are used.
  static constexpr size_t kLargeRead = 64 * 1024;
  std::array<char, 512> small_;
  std::unique_ptr<char[]> large_;
  // Replies the socket did not take yet (async write in flight). A list, not a deque: libstdc++'s deque
  // allocates ~600 bytes even when empty, and nearly every connection's queue stays empty.
  std::list<std::string> out_;
  size_t out_bytes_ = 0;  // bytes in out_
  bool writing_ = false;
  bool reading_ = false;  // an async read is in flight (none while the client's replies are backlogged)
  bool hung_up_ = false;
};

}  // namespace meshrun::rendezvous

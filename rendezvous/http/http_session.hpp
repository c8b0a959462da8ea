// HttpSession: one HTTP/1.1 connection to the live view (Boost.Beast). Reads a request under a deadline,
// answers it (asking the daemon's io thread for a snapshot when the endpoint needs state), and keeps the
// connection alive for the next one until the client closes it or stays idle past the idle timeout.
// Anything malformed or oversized gets a 400 and the connection is closed; failures stay in this session.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/http/routes.hpp"
#include "rendezvous/http/state_query.hpp"

namespace meshrun::rendezvous::http {

class HttpSession;

/// What a session needs from the server that owns it.
class HttpHost {
 public:
  virtual ~HttpHost() = default;
  /// Asks the io thread for a snapshot (state_query.hpp).
  virtual void query_state(SnapshotHandler done) = 0;
  virtual size_t connection_count() const = 0;
  virtual std::chrono::seconds idle_timeout() const = 0;
  virtual void on_closed(const std::shared_ptr<HttpSession>& session) = 0;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket socket, HttpHost& host, std::string peer);
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  void start() { do_read(); }
  /// Closes the connection (idempotent); a non-empty reason is logged.
  void close(const std::string& reason);

 private:
  void do_read();
  void on_read(boost::beast::error_code ec);
  template <typename Fn>
  void guarded(Fn&& fn);
  void handle(const boost::beast::http::request<boost::beast::http::string_body>& request);
  /// Writes `reply`; `close_after` ends the connection once it is sent.
  void send(const Reply& reply, bool close_after);
  void on_write(boost::beast::error_code ec, bool close_after);
  /// After the last reply: reads and drops what the client still sends, briefly, then closes. Closing
  /// with unread bytes would reset the connection and could destroy the reply before the client reads it.
  void linger();
  void drain();

  boost::beast::tcp_stream stream_;
  HttpHost& host_;
  std::string peer_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::shared_ptr<void> response_;  // the message being written (kept alive until on_write)
  std::array<char, 4096> drain_{};  // linger() reads into it
  unsigned version_ = 11;           // of the request being answered
  bool keep_alive_ = true;
  bool head_ = false;
  bool closed_ = false;
};

}  // namespace meshrun::rendezvous::http

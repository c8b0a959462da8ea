// HttpServer: the daemon's HTTP live view (--http-port): a listener and its connections on a thread of
// their own, so a slow browser never delays a store request. It reads daemon state only through
// StateQuery (a snapshot copied on the io thread), never directly. --allow applies: a refused peer is
// closed without a response and logged, like the store refuses.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/http/live_state.hpp"
#include "rendezvous/http/state_query.hpp"
#include "rendezvous/net/cidr.hpp"

namespace meshrun::rendezvous::http {

class HttpSession;

struct HttpOptions {
  std::string host = "0.0.0.0";           // the daemon's --host
  uint16_t port = 0;                      // 0 picks a free port
  std::vector<std::string> allow;         // the daemon's --allow CIDRs; empty = everyone
  std::chrono::seconds idle_timeout{30};  // a keep-alive connection silent this long is closed
  size_t max_connections = 256;           // more are closed at once (a page needs one or two)
};

class HttpServer {
 public:
  /// Binds at once (port() is valid, a bind error throws NetworkError here). `state_io` runs the daemon's
  /// io thread, where `live` lives; both must outlive this server.
  HttpServer(const HttpOptions& options, boost::asio::io_context& state_io, LiveState& live);
  /// Stops and joins the HTTP thread.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const { return port_; }
  /// Starts serving on the HTTP thread.
  void start();
  /// Thread-safe and idempotent: closes the listener and every connection, joins the HTTP thread.
  void stop();

 private:
  class Host;  // the HttpHost the sessions see (http_server.cpp)

  void accept();

  HttpOptions options_;
  std::vector<Cidr> allow_;
  boost::asio::io_context io_{1};  // one thread: the HTTP thread
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  StateQuery query_;
  std::unique_ptr<Host> host_;
  std::set<std::shared_ptr<HttpSession>> sessions_;  // HTTP thread only
  std::thread thread_;
  uint16_t port_ = 0;
};

}  // namespace meshrun::rendezvous::http

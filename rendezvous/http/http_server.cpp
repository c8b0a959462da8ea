#include "rendezvous/http/http_server.hpp"

#include <spdlog/spdlog.h>

#include "common/endpoint.hpp"
#include "common/error.hpp"
#include "rendezvous/http/health.hpp"
#include "rendezvous/http/http_session.hpp"
#include "rendezvous/net/listen_socket.hpp"

namespace meshrun::rendezvous::http {

namespace asio = boost::asio;
using asio::ip::tcp;

class HttpServer::Host final : public HttpHost {
 public:
  explicit Host(HttpServer& server) : server_(server) {}
  void query_state(SnapshotHandler done) override { server_.query_.ask(kHealthDeadline, std::move(done)); }
  size_t connection_count() const override { return server_.sessions_.size(); }
  std::chrono::seconds idle_timeout() const override { return server_.options_.idle_timeout; }
  void on_closed(const std::shared_ptr<HttpSession>& session) override { server_.sessions_.erase(session); }

 private:
  HttpServer& server_;
};

HttpServer::HttpServer(const HttpOptions& options, asio::io_context& state_io, LiveState& live)
    : options_(options), query_(io_, state_io, live), host_(std::make_unique<Host>(*this)) {
  for (const auto& rule : options.allow) allow_.push_back(Cidr::parse(rule));
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(options.host, std::to_string(options.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw UsageError("cannot resolve the HTTP listen address '" + options.host + "': " + ec.message());
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  open_listen_socket(acceptor_, ep, ec);
  if (ec) {
    throw NetworkError("cannot serve HTTP on " + meshrun::Endpoint{options.host, options.port}.to_string() + ": " +
                       ec.message() + " (pick another --http-port, or 0 for a free one)");
  }
  port_ = acceptor_.local_endpoint().port();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  if (thread_.joinable()) return;
  accept();
  thread_ = std::thread([this] { io_.run(); });
}

void HttpServer::stop() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    auto sessions = sessions_;  // closing a session erases it from sessions_
    for (const auto& s : sessions) s->close("");
    io_.stop();
  });
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void HttpServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (ec) {
      if (ec != asio::error::operation_aborted) spdlog::warn("http: accept failed: {}", ec.message());
      return accept();
    }
    boost::system::error_code peer_ec;
    const auto remote = socket.remote_endpoint(peer_ec);
    const std::string peer =
        peer_ec ? "?" : meshrun::Endpoint{address_text(remote.address()), remote.port()}.to_string();
    if (peer_ec || !allowed(allow_, address_text(remote.address()))) {
      spdlog::warn("http: closing connection from {}: peer not allowed by --allow", peer);
      socket.close(peer_ec);
    } else if (sessions_.size() >= options_.max_connections) {
      spdlog::warn("http: closing connection from {}: {} HTTP connections open already", peer, sessions_.size());
      socket.close(peer_ec);
    } else {
      auto session = std::make_shared<HttpSession>(std::move(socket), *host_, peer);
      sessions_.insert(session);
      session->start();
    }
    accept();
  });
}

}  // namespace meshrun::rendezvous::http

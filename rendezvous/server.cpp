// Server: the daemon assembled from its two layers on one io_context thread. StoreServer is the network
// layer (ports, connections, parked waits; store_server.hpp); RendezvousService answers the MESHRUN
// requests it hands over (rendezvous_service.hpp). All shared state is touched only from the io thread,
// so it needs no locks.
//
// The HTTP live view (rendezvous/http/, when --http-port is given) runs on a thread of its own and reads
// state only through LiveState, which lives here on the io thread.
//
// NOTE on failure isolation: anything a client sends that cannot be decoded or handled closes that
// client's connection with a logged reason; no exception escapes a handler into io_context::run().
#include "rendezvous/server.hpp"

#include <thread>

#include "rendezvous/http/http_server.hpp"
#include "rendezvous/http/live_state.hpp"
#include "rendezvous/rendezvous_service.hpp"  // first Asio include (it orders <utility> before Asio)
#include "rendezvous/store_server.hpp"

#include <spdlog/spdlog.h>

namespace meshrun::rendezvous {

namespace asio = boost::asio;

class Server::Impl {
 public:
  explicit Impl(const ServerOptions& options) : network_(io_, options), service_(io_, network_, options.join_token) {
    network_.start(service_);
    if (options.http_port) start_http(options);
  }
  uint16_t port() const { return network_.port(); }
  std::optional<uint16_t> http_port() const { return http_ ? std::optional<uint16_t>(http_->port()) : std::nullopt; }
  void run(bool handle_signals);
  void start_background() {
    if (http_) http_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  void stop();

 private:
  void start_http(const ServerOptions& options) {
    live_ = std::make_unique<http::LiveState>(io_, [this] { return service_.status_reply(); });
    http_ = std::make_unique<http::HttpServer>(http::HttpOptions{.host = options.host,
                                                                 .port = *options.http_port,
                                                                 .allow = options.allow,
                                                                 .idle_timeout = options.http_idle_timeout},
                                               io_, *live_);
  }

  asio::io_context io_{1};  // concurrency hint: exactly one thread runs it
  StoreServer network_;
  RendezvousService service_;
  std::unique_ptr<http::LiveState> live_;   // io thread; only with --http-port
  std::unique_ptr<http::HttpServer> http_;  // its own thread; reads state through live_
  asio::signal_set signals_{io_};
  std::thread thread_;
};

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
  if (http_) http_->start();
  io_.run();
}

void Server::Impl::stop() {
  if (http_) http_->stop();  // joins the HTTP thread, which never waits for this one
  asio::post(io_, [this] {
    boost::system::error_code ec;
    network_.close();
    service_.stop();
    if (live_) live_->stop();
    signals_.cancel(ec);
    io_.stop();
  });
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

Server::Server(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Server::~Server() { impl_->stop(); }
uint16_t Server::port() const { return impl_->port(); }
std::optional<uint16_t> Server::http_port() const { return impl_->http_port(); }
void Server::run(bool handle_signals) { impl_->run(handle_signals); }
void Server::start_background() { impl_->start_background(); }
void Server::stop() { impl_->stop(); }

}  // namespace meshrun::rendezvous

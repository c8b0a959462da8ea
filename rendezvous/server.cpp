// Server: the daemon assembled from its two layers on one io_context thread. StoreServer is the network
// layer (ports, connections, parked waits; store_server.hpp); RendezvousService answers the MESHRUN
// requests it hands over (rendezvous_service.hpp). All shared state is touched only from the io thread,
// so it needs no locks.
//
// NOTE on failure isolation: anything a client sends that cannot be decoded or handled closes that
// client's connection with a logged reason; no exception escapes a handler into io_context::run().
#include "rendezvous/server.hpp"

#include <thread>

#include "rendezvous/rendezvous_service.hpp"  // first Asio include (it orders <utility> before Asio)
#include "rendezvous/store_server.hpp"

#include <spdlog/spdlog.h>

namespace meshrun::rendezvous {

namespace asio = boost::asio;

class Server::Impl {
 public:
  explicit Impl(const ServerOptions& options) : network_(io_, options), service_(io_, network_) {
    network_.start(service_);
  }
  uint16_t port() const { return network_.port(); }
  void run(bool handle_signals);
  void start_background() {
    thread_ = std::thread([this] { io_.run(); });
  }
  void stop();

 private:
  asio::io_context io_{1};  // concurrency hint: exactly one thread runs it
  StoreServer network_;
  RendezvousService service_;
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
  io_.run();
}

void Server::Impl::stop() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    network_.close();
    service_.stop();
    signals_.cancel(ec);
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

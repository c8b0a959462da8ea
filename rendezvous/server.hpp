// Server: the meshrun-rendezvous daemon as a library. main() runs it in the foreground; the launcher
// runs it on a background thread when it hosts the rendezvous itself (--standalone, or c10d on the
// endpoint host).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "rendezvous/server_options.hpp"

namespace meshrun::rendezvous {

class Server {
 public:
  /// Binds the listening socket at once (so port() is valid and a bind error throws here: AddressInUseError,
  /// listen_socket.hpp, when the store's port is taken).
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound port (the real one when options.port was 0).
  uint16_t port() const;
  /// The HTTP live view's bound port; nullopt when options.http_port was unset.
  std::optional<uint16_t> http_port() const;
  /// Serves until stop() (or SIGINT/SIGTERM when handle_signals is true). Blocks.
  void run(bool handle_signals = false);
  /// Starts serving on a background thread; stop() or the destructor joins it.
  void start_background();
  /// Thread-safe; makes run() return.
  void stop();

 private:
  class Impl;  // the io_context and the two layers (server.cpp); opaque, so users need no Asio
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshrun::rendezvous

// Listener: one listening port of the daemon and the store behind it. The main port serves the shared
// store; each run gets a private port (and so a key space of its own) for its workers.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <string>

#include "rendezvous/kv_store.hpp"

namespace meshrun::rendezvous {

struct Listener {
  Listener(boost::asio::io_context& io, std::string run) : acceptor(io), run_id(std::move(run)) {}
  boost::asio::ip::tcp::acceptor acceptor;
  KvStore store;
  std::string run_id;  // empty for the main port
};

}  // namespace meshrun::rendezvous

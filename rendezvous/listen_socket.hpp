// open_listen_socket: how every listening socket of the daemon is opened (the store ports and the HTTP
// live view), so a socket option never differs between them.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>

namespace meshrun::rendezvous {

/// Opens, binds and listens `acceptor` on `ep` with SO_REUSEADDR; "::" is made dual-stack (IPv4 clients
/// as v4-mapped addresses) whatever net.ipv6.bindv6only says. Errors land in `ec`.
inline void open_listen_socket(boost::asio::ip::tcp::acceptor& acceptor, const boost::asio::ip::tcp::endpoint& ep,
                               boost::system::error_code& ec) {
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(boost::asio::ip::tcp::acceptor::reuse_address(true), ec);
  if (!ec && ep.address().is_v6() && ep.address().is_unspecified()) {
    acceptor.set_option(boost::asio::ip::v6_only(false), ec);
  }
  if (!ec) acceptor.bind(ep, ec);
  // With SO_REUSEADDR two processes may both bind the port; the second then fails in listen().
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
}

}  // namespace meshrun::rendezvous

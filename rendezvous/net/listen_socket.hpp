// The daemon's listening sockets: how each is opened (the store ports and the HTTP live view), so a
// socket option never differs between them; the error a taken store port raises; how a peer's address
// is written.
#pragma once

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <string>

#include "common/error.hpp"

namespace meshrun::rendezvous {

/// The store's listen port is taken by another process (a c10d agent then becomes a client instead).
/// The HTTP live view's port being taken is a plain NetworkError: it must not turn an agent into a client.
class AddressInUseError : public NetworkError {
 public:
  using NetworkError::NetworkError;
};

/// "1.2.3.4" for IPv4 and IPv4-mapped IPv6 addresses, the usual text otherwise.
inline std::string address_text(const boost::asio::ip::address& addr) {
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, addr.to_v6()).to_string();
  }
  return addr.to_string();
}

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

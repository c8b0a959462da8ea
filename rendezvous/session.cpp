#include "rendezvous/session.hpp"

#include "common/endpoint.hpp"
#include "rendezvous/net/listen_socket.hpp"

namespace meshrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

ConnectionPeer peer_of(const tcp::socket& socket) {
  ConnectionPeer peer;
  boost::system::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  peer.address = ec ? "?" : address_text(remote.address());
  peer.endpoint = ec ? "?" : Endpoint{peer.address, remote.port()}.to_string();  // [v6]:port
  const auto local = socket.local_endpoint(ec);
  peer.local_addr = ec ? "" : address_text(local.address());
  return peer;
}

}  // namespace

Session::Session(tcp::socket socket, ConnectionHost& host, const std::shared_ptr<Listener>& listener, bool allowed)
    : socket_(std::move(socket)),
      // The store lives as long as the listener it belongs to: the connection shares the listener's ownership.
      connection_(std::make_shared<StoreConnection>(host, *this, std::shared_ptr<KvStore>(listener, &listener->store),
                                                    peer_of(socket_), allowed)) {
  boost::system::error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  socket_.non_blocking(true, ec);  // replies are written directly when the socket takes them
}

void Session::hang_up(const std::string& last) {
  if (hung_up_) return;
  hung_up_ = true;
  boost::system::error_code ec;
  if (!last.empty()) socket_.write_some(asio::buffer(last), ec);
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

void Session::do_read() {
  if (reading_ || hung_up_ || !connection_->wants_input()) return;  // backlogged: do_write resumes reading
  reading_ = true;
  auto self = shared_from_this();
  const auto buffer = large_ ? asio::buffer(large_.get(), kLargeRead) : asio::buffer(small_);
  socket_.async_read_some(buffer, [this, self](boost::system::error_code ec, size_t n) {
    reading_ = false;
    if (hung_up_) return;
    if (ec) {
      connection_->close(ec == asio::error::eof || ec == asio::error::connection_reset ? "" : "read: " + ec.message());
      return;
    }
    connection_->receive(std::string_view(large_ ? large_.get() : small_.data(), n));
    if (!large_ && n == small_.size()) {
      large_.reset(new char[kLargeRead]);  // uninitialised on purpose: reads overwrite what they use
    } else if (large_ && n < small_.size()) {
      large_.reset();
    }
    do_read();
  });
}

void Session::deliver(std::string& replies) {
  if (hung_up_) {
    replies.clear();
    return;
  }
  if (writing_) {
    out_bytes_ += replies.size();
    out_.push_back(std::move(replies));
    replies.clear();
    return;
  }
  // Fast path: one non-blocking write, no completion handler; the rest (if any) goes async.
  boost::system::error_code ec;
  const size_t n = socket_.write_some(asio::buffer(replies), ec);
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
    replies.clear();
    connection_->close("write: " + ec.message());
    return;
  }
  if (n == replies.size()) {
    replies.clear();
    return;
  }
  out_.push_back(replies.substr(n));
  out_bytes_ += out_.back().size();
  replies.clear();
  do_write();
}

void Session::do_write() {
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(out_.front()), [this, self](boost::system::error_code ec, size_t) {
    if (hung_up_) return;
    if (ec) {
      connection_->close("write: " + ec.message());
      return;
    }
    out_bytes_ -= out_.front().size();
    out_.pop_front();
    if (out_.empty()) {
      writing_ = false;
    } else {
      do_write();
    }
    if (connection_->wants_input()) {  // requests held back for a backlog the client has now drained
      connection_->resume();
      do_read();  // no-op while a read is in flight
    }
  });
}

}  // namespace meshrun::rendezvous

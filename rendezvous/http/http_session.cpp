#include "rendezvous/http/http_session.hpp"

#include <spdlog/spdlog.h>

namespace meshrun::rendezvous::http {

namespace beast = boost::beast;
namespace bhttp = beast::http;

namespace {

// A GET needs neither a large header nor a body; anything bigger is refused with 400 before it is buffered.
constexpr size_t kMaxHeaderBytes = 8 * 1024;
constexpr size_t kMaxBodyBytes = 4 * 1024;
// A client that stops reading its reply is dropped after this long.
constexpr auto kWriteTimeout = std::chrono::seconds(10);
// After the last reply the client gets this long to stop sending (see linger()).
constexpr auto kLingerTimeout = std::chrono::seconds(2);

// Errors of the HTTP parser (and of the buffer's limit) are the client's fault: they get a 400.
bool is_bad_request(beast::error_code ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() ||
         ec == bhttp::error::buffer_overflow;
}

}  // namespace

HttpSession::HttpSession(boost::asio::ip::tcp::socket socket, HttpHost& host, std::string peer)
    : stream_(std::move(socket)), host_(host), peer_(std::move(peer)), buffer_(kMaxHeaderBytes + kMaxBodyBytes) {}

void HttpSession::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) spdlog::warn("http: closing connection from {}: {}", peer_, reason);
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  host_.on_closed(shared_from_this());
}

void HttpSession::do_read() {
  parser_.emplace();
  parser_->header_limit(kMaxHeaderBytes);
  parser_->body_limit(kMaxBodyBytes);
  stream_.expires_after(host_.idle_timeout());
  bhttp::async_read(stream_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void HttpSession::on_read(beast::error_code ec) {
  if (closed_) return;
  if (ec == bhttp::error::end_of_stream || ec == boost::asio::error::connection_reset) return close("");
  if (ec == beast::error::timeout) {
    SPDLOG_DEBUG("http: {} idle for {} s: closing", peer_, host_.idle_timeout().count());
    return close("");
  }
  if (ec == bhttp::error::partial_message) return close("connection closed in the middle of a request");
  if (is_bad_request(ec)) {
    version_ = 11;
    head_ = false;
    spdlog::warn("http: bad request from {}: {}", peer_, ec.message());
    return send(bad_request(ec.message()), /*close_after=*/true);
  }
  if (ec) return close("read: " + ec.message());
  guarded([&] { handle(parser_->get()); });
}

// An exception while answering must not escape into the HTTP thread's run loop (it would end the daemon):
// the client gets a 500 and this connection is closed.
template <typename Fn>
void HttpSession::guarded(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    spdlog::error("http: answering {} failed: {}", peer_, e.what());
    if (!closed_ && !response_) send(Reply{500, "text/plain; charset=utf-8", "internal error\n"}, true);
  }
}

void HttpSession::handle(const bhttp::request<bhttp::string_body>& request) {
  version_ = request.version();
  keep_alive_ = request.keep_alive();
  head_ = request.method() == bhttp::verb::head;
  if (request.method() != bhttp::verb::get && !head_) {
    return send(method_not_allowed(std::string(request.method_string())), !keep_alive_);
  }
  const Route route = parse_route(std::string_view(request.target().data(), request.target().size()));
  if (!needs_snapshot(route.resource)) return send(render(route, nullptr, 0, host_.connection_count()), !keep_alive_);
  host_.query_state([self = shared_from_this(), route](std::shared_ptr<const LiveSnapshot> snapshot, double took) {
    if (self->closed_) return;
    self->guarded(
        [&] { self->send(render(route, snapshot.get(), took, self->host_.connection_count()), !self->keep_alive_); });
  });
}

void HttpSession::send(const Reply& reply, bool close_after) {
  const auto status = static_cast<bhttp::status>(reply.status);
  auto write = [&](auto message) {
    message.set(bhttp::field::server, "meshrun-rendezvous");
    message.set(bhttp::field::content_type, reply.content_type);
    message.set(bhttp::field::cache_control, "no-store");
    if (reply.status == 405) message.set(bhttp::field::allow, "GET, HEAD");
    message.keep_alive(!close_after);
    auto shared = std::make_shared<decltype(message)>(std::move(message));
    response_ = shared;
    stream_.expires_after(kWriteTimeout);
    bhttp::async_write(stream_, *shared, [self = shared_from_this(), close_after](beast::error_code ec, size_t) {
      self->on_write(ec, close_after);
    });
  };
  if (head_) {  // the headers GET would send, Content-Length included, and no body
    bhttp::response<bhttp::empty_body> message{status, version_};
    message.content_length(reply.body.size());
    write(std::move(message));
  } else {
    bhttp::response<bhttp::string_body> message{status, version_};
    message.body() = reply.body;
    message.prepare_payload();
    write(std::move(message));
  }
}

void HttpSession::on_write(beast::error_code ec, bool close_after) {
  response_.reset();
  if (closed_) return;
  if (ec) return close("write: " + ec.message());
  if (close_after) return linger();
  do_read();
}

void HttpSession::linger() {
  beast::error_code ec;
  stream_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ec);
  stream_.expires_after(kLingerTimeout);  // one deadline for the whole drain
  drain();
}

void HttpSession::drain() {
  stream_.async_read_some(boost::asio::buffer(drain_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close("");
    self->drain();
  });
}

}  // namespace meshrun::rendezvous::http

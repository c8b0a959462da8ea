#include "launcher/etcd/gateway_exchange.hpp"

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>

#include "common/error.hpp"

namespace meshrun::launcher::etcd {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

class GatewayTls {
 public:
  explicit GatewayTls(const EtcdTls& tls) : context_(asio::ssl::context::tls_client) {
    context_.set_verify_mode(asio::ssl::verify_peer);
    if (tls.ca_file.empty()) {
      context_.set_default_verify_paths();
    } else {
      load("ca_cert", tls.ca_file, [&] { context_.load_verify_file(tls.ca_file); });
    }
    if (tls.cert_file.empty() != tls.key_file.empty()) {
      throw UsageError(
          "--rdzv-conf: a client certificate needs both ssl_cert= (cert=) and ssl_cert_key= (key=), or neither");
    }
    if (!tls.cert_file.empty()) {
      load("ssl_cert", tls.cert_file, [&] { context_.use_certificate_chain_file(tls.cert_file); });
      load("ssl_cert_key", tls.key_file, [&] { context_.use_private_key_file(tls.key_file, asio::ssl::context::pem); });
    }
  }

  asio::ssl::context& context() { return context_; }

 private:
  template <typename Load>
  static void load(const char* key, const std::string& file, Load&& do_load) {
    try {
      do_load();
    } catch (const boost::system::system_error& e) {
      throw UsageError(std::string("--rdzv-conf ") + key + "=" + file + ": cannot use it as PEM (" + e.what() + ")");
    }
  }

  asio::ssl::context context_;
};

std::shared_ptr<GatewayTls> make_gateway_tls(const EtcdTls& tls) {
  return tls.enabled ? std::make_shared<GatewayTls>(tls) : nullptr;
}

namespace {

bool is_ip_literal(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

class Exchange {
 public:
  explicit Exchange(const GatewayCall& call) : call_(call), deadline_(std::min(call.send_deadline, call.deadline)) {
    if (call.tls != nullptr) {
      secure_.emplace(io_, call.tls->context());
    } else {
      plain_.emplace(io_);
    }
  }

  GatewayReply post(const std::string& path, const std::string& body,
                    const std::function<bool(const std::string&)>& enough) {
    connect();
    http::request<http::string_body> request{http::verb::post, path, 11};
    request.set(http::field::host, call_.endpoint.to_string());
    request.set(http::field::content_type, "application/json");
    if (!call_.authorization.empty()) request.set(http::field::authorization, call_.authorization);
    request.body() = body;
    request.prepare_payload();
    on_stream([&](auto& stream) {
      run([&](auto done) { http::async_write(stream, request, [done](auto ec, size_t) { done(ec); }); });
    });
    deadline_ = call_.deadline;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    while (!parser.is_done()) {
      const bool streaming = enough && parser.is_header_done() && parser.get().result() == http::status::ok;
      if (streaming && enough(parser.get().body())) break;
      on_stream([&](auto& stream) {
        run([&](auto done) { http::async_read_some(stream, buffer_, parser, [done](auto ec, size_t) { done(ec); }); });
      });
    }
    auto response = parser.release();
    return GatewayReply{response.result_int(), std::move(response.body())};
  }

 private:
  void connect() {
    asio::ip::tcp::resolver resolver(io_);
    asio::ip::tcp::resolver::results_type addresses;
    const Endpoint& endpoint = call_.endpoint;
    run([&](auto done) {
      resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                             [&, done](boost::system::error_code ec, auto results) {
                               addresses = results;
                               done(ec);
                             });
    });
    auto& lowest = secure_ ? beast::get_lowest_layer(*secure_) : *plain_;
    run([&](auto done) { lowest.async_connect(addresses, [done](auto ec, const auto&) { done(ec); }); });
    if (!secure_) return;
    // The member's certificate must name the host as given: its DNS name (sent as SNI too) or its address.
    if (!is_ip_literal(endpoint.host)) SSL_set_tlsext_host_name(secure_->native_handle(), endpoint.host.c_str());
    secure_->set_verify_callback(asio::ssl::host_name_verification(endpoint.host));
    try {
      run([&](auto done) { secure_->async_handshake(asio::ssl::stream_base::client, [done](auto ec) { done(ec); }); });
    } catch (const NetworkError& e) {
      throw NetworkError(std::string("TLS handshake failed: ") + e.what() +
                         " (check --rdzv-conf ca_cert= names the CA that signed the members' certificates, and "
                         "ssl_cert=/ssl_cert_key= when etcd asks for a client certificate)");
    }
  }

  template <typename Use>
  void on_stream(Use&& use) {
    if (secure_) {
      use(*secure_);
    } else {
      use(*plain_);
    }
  }

  // Starts one asynchronous step and runs the loop until it completes or the deadline passes.
  template <typename Start>
  void run(Start start) {
    boost::system::error_code result = asio::error::would_block;
    start([&result](boost::system::error_code ec) { result = ec; });
    io_.restart();
    io_.run_until(deadline_);
    if (result == asio::error::would_block) {
      (secure_ ? beast::get_lowest_layer(*secure_) : *plain_).socket().close();
      io_.restart();
      io_.run();
      throw TimeoutError("no answer in time");
    }
    if (result) throw NetworkError(result.message());
  }

  const GatewayCall& call_;
  GatewayDeadline deadline_;  // of the step under way
  asio::io_context io_;
  std::optional<beast::tcp_stream> plain_;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure_;
  beast::flat_buffer buffer_;
};

}  // namespace

GatewayReply post_to_gateway(const GatewayCall& call, const std::string& path, const std::string& body,
                             const std::function<bool(const std::string&)>& enough) {
  return Exchange(call).post(path, body, enough);
}

}  // namespace meshrun::launcher::etcd

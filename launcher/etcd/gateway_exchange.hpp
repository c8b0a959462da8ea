// One HTTP/1.1 POST to an etcd member's JSON gateway, on a connection of its own (a dead member never holds a
// half-open socket), plain or TLS. TLS verifies the member's certificate against the given CA (or the system's)
// and its name or address, and shows a client certificate when one is given (etcd's --client-cert-auth).
// Resolving, connecting, the handshake and sending are bounded by the send deadline, reading by the deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/endpoint.hpp"

namespace meshrun::launcher::etcd {

/// TLS to the members (https:// endpoints, or --rdzv-conf protocol=https): the CA that signed their certificates
/// (empty: the system's CAs), and a client certificate and its key, PEM (both empty: none).
struct EtcdTls {
  bool enabled = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

/// The TLS settings of one client, made once (an OpenSSL context).
class GatewayTls;

/// Null when `tls` is not enabled. Throws UsageError naming the file (and its --rdzv-conf key) it cannot use.
std::shared_ptr<GatewayTls> make_gateway_tls(const EtcdTls& tls);

struct GatewayReply {
  unsigned status = 0;
  std::string body;
};

using GatewayDeadline = std::chrono::steady_clock::time_point;

struct GatewayCall {
  Endpoint endpoint;
  GatewayTls* tls = nullptr;  // null: plain HTTP
  GatewayDeadline send_deadline;
  GatewayDeadline deadline;
  std::string authorization;  // the Authorization header; empty: none
};

/// POSTs `body` to `path`. `enough`, when set, is asked after each piece of a streamed body whether to stop
/// reading (a watch never ends by itself). Throws TimeoutError past a deadline, NetworkError when the
/// connection or the TLS handshake fails (naming why: a certificate etcd's CA did not sign, ...).
GatewayReply post_to_gateway(const GatewayCall& call, const std::string& path, const std::string& body,
                             const std::function<bool(const std::string&)>& enough);

}  // namespace meshrun::launcher::etcd

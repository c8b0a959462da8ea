// ServerOptions: everything meshrun-rendezvous can be told on its command line (and what an agent
// that hosts the daemon in-process sets).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/store/tcpstore_protocol.hpp"

namespace meshrun::rendezvous {

struct ServerOptions {
  std::string host = "0.0.0.0";       // address to bind ("0.0.0.0", "::", "127.0.0.1", a name)
  uint16_t port = 29400;              // 0 picks a free port
  std::vector<std::string> allow;     // CIDRs allowed to connect; empty = everyone
  proto::Limits limits;               // per-message caps
  std::string join_token;             // non-empty: rendezvous ops need its proof (proto/rendezvous/join_auth.hpp)
  std::optional<uint16_t> http_port;  // the HTTP live view (rendezvous/http/): off when unset, 0 picks a free port
  std::chrono::seconds http_idle_timeout{30};  // an HTTP keep-alive connection silent this long is closed
};

}  // namespace meshrun::rendezvous

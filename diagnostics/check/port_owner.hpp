// Who listens on a TCP port of this host: /proc/net/tcp{,6} give the socket inode of each listener,
// /proc/<pid>/fd links name the process holding it. No root needed, but other users' processes
// are only visible to root (their pid is then reported as unknown).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::diagnostics {

/// One row of /proc/net/tcp or /proc/net/tcp6.
struct TcpSocketRow {
  std::string local_address;  // numeric, e.g. "127.0.0.1" or "::"
  uint16_t local_port = 0;
  bool listening = false;  // state 0A (TCP_LISTEN)
  uint64_t inode = 0;
};

/// Parses one data line of /proc/net/tcp{,6}; nullopt for the header or a malformed line.
std::optional<TcpSocketRow> parse_proc_net_tcp_line(std::string_view line);

struct PortListener {
  std::string address;  // the bound address
  uint64_t inode = 0;
  int pid = 0;          // 0 when no visible process holds the socket
  std::string command;  // /proc/<pid>/comm, when pid is known
};

/// Every listening TCP socket on `port` in this network namespace, with its owner where visible.
/// `proc_root` is "/proc" except in tests.
std::vector<PortListener> find_port_listeners(uint16_t port, const std::string& proc_root = "/proc");

}  // namespace meshrun::diagnostics

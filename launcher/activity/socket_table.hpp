// The sockets of one network namespace, as /proc/<pid>/net/{tcp,tcp6,udp,udp6,unix} list them, by inode: what a
// socket descriptor is, where a TCP connection's other end is on this host (the same connection seen from the
// other side), and a Unix socket's peer (the kernel's sock_diag, asked only of the live kernel). For
// wait_probe.hpp; addresses are written "10.0.0.1:5000" or "[fd00::1]:5000" (an IPv4-mapped IPv6 address as IPv4).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace meshrun::launcher {

/// A TCP or UDP socket.
struct InetSocket {
  uint64_t inode = 0;
  std::string local;
  std::string remote;  // "" when not connected (listening, an unconnected UDP socket)
  int state = 0;       // the kernel's TCP state number (1 established, 2 SYN sent, 10 listen; UDP: 7 or 1)
  bool udp = false;

  bool listening() const { return !udp && state == kListen; }
  bool connecting() const { return !udp && state == kSynSent; }
  static constexpr int kSynSent = 2;
  static constexpr int kListen = 10;
};

class SocketTable {
 public:
  /// The tables of `pid`'s network namespace under `proc_root`; Unix peers from the kernel when `live`.
  static SocketTable read(const std::string& proc_root, pid_t pid, bool live);
  /// Parses one table's text (exposed for tests); `udp` for the udp tables.
  void add_inet_table(const std::string& text, bool udp);
  void add_unix_table(const std::string& text);
  void set_unix_peer(uint64_t inode, uint64_t peer) { unix_peers_[inode] = peer; }

  const InetSocket* inet(uint64_t inode) const;
  bool is_unix(uint64_t inode) const { return unix_paths_.count(inode) > 0; }
  std::string unix_path(uint64_t inode) const;
  /// The socket at the other end of TCP connection `s`, when both ends are in this namespace.
  std::optional<uint64_t> tcp_peer(const InetSocket& s) const;
  std::optional<uint64_t> unix_peer(uint64_t inode) const;

 private:
  std::map<uint64_t, InetSocket> inet_;
  std::map<std::pair<std::string, std::string>, uint64_t> by_ends_;  // TCP (local, remote) -> inode
  std::map<uint64_t, std::string> unix_paths_;
  std::map<uint64_t, uint64_t> unix_peers_;
};

/// "0100007F:1F90" (a table's address, in this host's byte order) -> "127.0.0.1:8080"; "" when malformed.
std::string table_address(const std::string& hex);

}  // namespace meshrun::launcher

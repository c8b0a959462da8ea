#include "launcher/activity/socket_table.hpp"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/unique_fd.hpp"
#include "launcher/activity/proc_tree.hpp"

namespace meshrun::launcher {
namespace {

bool hex_u32(const std::string& text, size_t at, uint32_t& out) {
  if (at + 8 > text.size()) return false;
  out = 0;
  for (size_t i = at; i < at + 8; ++i) {
    const char c = text[i];
    const int v = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (v < 0) return false;
    out = out << 4 | static_cast<uint32_t>(v);
  }
  return true;
}

// The kernel prints each 32-bit word of the address as the host reads it from memory (network byte order bytes
// in host order): copying the words back into memory restores the address's bytes.
std::string address_text(const std::string& hex) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (hex.size() == 8) {
    uint32_t word = 0;
    if (!hex_u32(hex, 0, word)) return "";
    in_addr a{};
    std::memcpy(&a, &word, 4);
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) != nullptr ? buf : "";
  }
  if (hex.size() != 32) return "";
  in6_addr a{};
  for (size_t i = 0; i < 4; ++i) {
    uint32_t word = 0;
    if (!hex_u32(hex, i * 8, word)) return "";
    std::memcpy(reinterpret_cast<char*>(&a) + i * 4, &word, 4);
  }
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr v4{};
    std::memcpy(&v4, reinterpret_cast<char*>(&a) + 12, 4);
    return ::inet_ntop(AF_INET, &v4, buf, sizeof buf) != nullptr ? buf : "";
  }
  if (::inet_ntop(AF_INET6, &a, buf, sizeof buf) == nullptr) return "";
  return std::string("[") + buf + "]";
}

bool unconnected(const std::string& text) { return text.empty() || text == "0.0.0.0:0" || text == "[::]:0"; }

// Every Unix socket's peer in this namespace, from the kernel's sock_diag (inode -> peer inode).
std::map<uint64_t, uint64_t> unix_peers_from_kernel() {
  std::map<uint64_t, uint64_t> peers;
  UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd.valid()) return peers;
  struct {
    nlmsghdr header;
    unix_diag_req request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = AF_UNIX;
  message.request.udiag_states = ~0U;
  message.request.udiag_show = UDIAG_SHOW_PEER;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd.get(), &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return peers;
  timeval timeout{1, 0};  // the dump comes at once; never wait long on a kernel that does not answer
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::vector<char> buf(64 * 1024);
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n <= 0) return peers;
    auto len = static_cast<unsigned>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) return peers;
      const auto* d = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
      auto attr_len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *d));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<unix_diag_msg*>(d) + 1); RTA_OK(a, attr_len);
           a = RTA_NEXT(a, attr_len)) {
        if (a->rta_type != UNIX_DIAG_PEER) continue;
        uint32_t peer = 0;
        std::memcpy(&peer, RTA_DATA(a), sizeof peer);
        if (peer != 0) peers[d->udiag_ino] = peer;
      }
    }
  }
}

}  // namespace

std::string table_address(const std::string& hex) {
  const auto colon = hex.find(':');
  if (colon == std::string::npos) return "";
  const std::string address = address_text(hex.substr(0, colon));
  if (address.empty()) return "";
  unsigned port = 0;
  try {
    port = static_cast<unsigned>(std::stoul(hex.substr(colon + 1), nullptr, 16));
  } catch (const std::exception&) {
    return "";
  }
  return address + ":" + std::to_string(port);
}

void SocketTable::add_inet_table(const std::string& text, bool udp) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode))
      continue;
    InetSocket s;
    try {
      s.inode = std::stoull(inode);
      s.state = static_cast<int>(std::stoul(state, nullptr, 16));
    } catch (const std::exception&) {
      continue;
    }
    if (s.inode == 0) continue;  // TIME_WAIT and the like: no descriptor holds them
    s.udp = udp;
    s.local = table_address(local);
    s.remote = table_address(remote);
    if (unconnected(s.remote)) s.remote.clear();
    if (!udp && !s.remote.empty()) by_ends_[{s.local, s.remote}] = s.inode;
    inet_[s.inode] = std::move(s);
  }
}

void SocketTable::add_unix_table(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string num, refs, protocol, flags, type, state, inode, path;
    if (!(fields >> num >> refs >> protocol >> flags >> type >> state >> inode)) continue;
    fields >> path;
    try {
      unix_paths_[std::stoull(inode)] = path;
    } catch (const std::exception&) {}
  }
}

SocketTable SocketTable::read(const std::string& proc_root, pid_t pid, bool live) {
  SocketTable table;
  const std::string net = proc_root + "/" + std::to_string(pid) + "/net/";
  table.add_inet_table(read_proc_file(net + "tcp"), false);
  table.add_inet_table(read_proc_file(net + "tcp6"), false);
  table.add_inet_table(read_proc_file(net + "udp"), true);
  table.add_inet_table(read_proc_file(net + "udp6"), true);
  table.add_unix_table(read_proc_file(net + "unix"));
  if (live) table.unix_peers_ = unix_peers_from_kernel();
  return table;
}

const InetSocket* SocketTable::inet(uint64_t inode) const {
  const auto it = inet_.find(inode);
  return it == inet_.end() ? nullptr : &it->second;
}

std::string SocketTable::unix_path(uint64_t inode) const {
  const auto it = unix_paths_.find(inode);
  return it == unix_paths_.end() ? std::string() : it->second;
}

std::optional<uint64_t> SocketTable::tcp_peer(const InetSocket& s) const {
  if (s.udp || s.remote.empty()) return std::nullopt;
  const auto it = by_ends_.find({s.remote, s.local});
  if (it == by_ends_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint64_t> SocketTable::unix_peer(uint64_t inode) const {
  const auto it = unix_peers_.find(inode);
  if (it == unix_peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace meshrun::launcher

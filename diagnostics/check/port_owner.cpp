#include "diagnostics/check/port_owner.hpp"

#include <arpa/inet.h>

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace meshrun::diagnostics {
namespace {

namespace fs = std::filesystem;

bool parse_hex(std::string_view text, uint64_t& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// The kernel prints the address as the in-memory 32-bit words in host byte order.
std::optional<std::string> parse_address(std::string_view hex) {
  if (hex.size() != 8 && hex.size() != 32) return std::nullopt;
  unsigned char bytes[16] = {};
  for (size_t word = 0; word < hex.size() / 8; ++word) {
    uint64_t value = 0;
    if (!parse_hex(hex.substr(word * 8, 8), value)) return std::nullopt;
    const auto v32 = static_cast<uint32_t>(value);
    std::memcpy(bytes + word * 4, &v32, 4);
  }
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(hex.size() == 8 ? AF_INET : AF_INET6, bytes, buf, sizeof buf);
  return std::string(buf);
}

// socket inode -> pid, from the /proc/<pid>/fd/* links we are allowed to read.
std::map<uint64_t, int> socket_owners(const std::string& proc_root) {
  std::map<uint64_t, int> owners;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    auto [ptr, perr] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (perr != std::errc() || ptr != name.data() + name.size()) continue;
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(entry.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd.path(), link_ec).string();
      if (link_ec || target.rfind("socket:[", 0) != 0 || target.back() != ']') continue;
      uint64_t inode = 0;
      auto digits = std::string_view(target).substr(8, target.size() - 9);
      auto [p, e] = std::from_chars(digits.data(), digits.data() + digits.size(), inode);
      if (e == std::errc()) owners.emplace(inode, pid);
    }
  }
  return owners;
}

}  // namespace

std::optional<TcpSocketRow> parse_proc_net_tcp_line(std::string_view line) {
  std::istringstream in{std::string(line)};
  std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
  if (!(in >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
    return std::nullopt;
  }
  if (sl.empty() || sl.back() != ':') return std::nullopt;  // the header line starts with "sl"
  const auto colon = local.find(':');
  if (colon == std::string::npos) return std::nullopt;
  TcpSocketRow row;
  auto address = parse_address(std::string_view(local).substr(0, colon));
  uint64_t port = 0;
  uint64_t st = 0;
  if (!address || !parse_hex(std::string_view(local).substr(colon + 1), port) || port > 65535 ||
      !parse_hex(state, st)) {
    return std::nullopt;
  }
  auto [p, e] = std::from_chars(inode.data(), inode.data() + inode.size(), row.inode);
  if (e != std::errc()) return std::nullopt;
  row.local_address = *address;
  row.local_port = static_cast<uint16_t>(port);
  row.listening = st == 0x0A;
  return row;
}

std::vector<PortListener> find_port_listeners(uint16_t port, const std::string& proc_root) {
  std::vector<PortListener> out;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc_root + table);
    std::string line;
    while (std::getline(in, line)) {
      const auto row = parse_proc_net_tcp_line(line);
      if (!row || !row->listening || row->local_port != port) continue;
      out.push_back({.address = row->local_address, .inode = row->inode, .pid = 0, .command = {}});
    }
  }
  if (out.empty()) return out;
  const auto owners = socket_owners(proc_root);
  for (auto& listener : out) {
    auto it = owners.find(listener.inode);
    if (it == owners.end()) continue;
    listener.pid = it->second;
    std::ifstream comm(proc_root + "/" + std::to_string(it->second) + "/comm");
    std::getline(comm, listener.command);
  }
  return out;
}

}  // namespace meshrun::diagnostics

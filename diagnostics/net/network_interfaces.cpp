#include "diagnostics/net/network_interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <utility>

namespace meshrun::diagnostics {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

std::string address_scope(const std::string& address) {
  in_addr v4{};
  if (::inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    const uint32_t a = ntohl(v4.s_addr);
    if ((a >> 24) == 127) return "loopback";
    if ((a >> 24) == 10 || (a >> 20) == (172u << 4 | 1u) || (a >> 16) == (192u << 8 | 168u)) return "private";
    if ((a >> 16) == (169u << 8 | 254u)) return "link-local";
    return "public";
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, address.c_str(), &v6) != 1) return "";
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return "loopback";
  if (IN6_IS_ADDR_LINKLOCAL(&v6)) return "link-local";
  if ((v6.s6_addr[0] & 0xfe) == 0xfc) return "private";
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, v6.s6_addr + 12, buf, sizeof buf);
    return address_scope(buf);
  }
  return "public";
}

std::vector<std::string> list_interface_names() {
  std::vector<std::string> names;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return names;
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (std::find(names.begin(), names.end(), ifa->ifa_name) == names.end()) names.emplace_back(ifa->ifa_name);
  }
  return names;
}

std::vector<std::string> nccl_ifname_matches(const std::string& spec, const std::vector<std::string>& names) {
  std::string rest = spec;
  const bool exclude = !rest.empty() && rest.front() == '^';
  if (exclude) rest.erase(0, 1);
  const bool exact = !rest.empty() && rest.front() == '=';
  if (exact) rest.erase(0, 1);
  const auto patterns = split_commas(rest);
  std::vector<std::string> out;
  for (const auto& name : names) {
    const bool hit = std::any_of(patterns.begin(), patterns.end(),
                                 [&](const std::string& p) { return exact ? name == p : name.rfind(p, 0) == 0; });
    if (hit != exclude) out.push_back(name);
  }
  return out;
}

std::vector<std::string> gloo_ifname_matches(const std::string& spec, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& wanted : split_commas(spec)) {
    if (std::find(names.begin(), names.end(), wanted) != names.end()) out.push_back(wanted);
  }
  return out;
}

}  // namespace meshrun::diagnostics

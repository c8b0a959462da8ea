#include "launcher/hosts/hostfile.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <sstream>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace meshrun::launcher {
namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// "host1@host2:0,2" -> host -> slots (empty: the whole host).
std::map<std::string, std::vector<int>> parse_filter(const std::string& spec, const std::string& flag) {
  std::map<std::string, std::vector<int>> out;
  for (const auto& item : split(spec, '@')) {
    if (item.empty()) throw UsageError(flag + " '" + spec + "': empty host (expected host1@host2:0,1)");
    const auto colon = item.find(':');
    const std::string host = item.substr(0, colon);
    auto& slots = out[host];
    if (colon == std::string::npos) continue;
    for (const auto& s : split(item.substr(colon + 1), ',')) {
      const auto v = to_int(s);
      if (!v || *v < 0) throw UsageError(flag + " '" + spec + "': '" + s + "' is not a slot number");
      slots.push_back(*v);
    }
  }
  return out;
}

std::vector<int> all_slots(const HostEntry& h) {
  std::vector<int> v;
  for (int i = 0; i < h.slots; ++i) v.push_back(i);
  return v;
}

void check_slots(const HostEntry& h, const std::vector<int>& slots, const std::string& flag) {
  for (int s : slots) {
    if (h.slots == 0)
      throw UsageError(flag + ": host " + h.host + " has no slots=N in the hostfile, so slot " + std::to_string(s) +
                       " cannot be picked");
    if (s >= h.slots) {
      throw UsageError(flag + ": host " + h.host + " has slots 0.." + std::to_string(h.slots - 1) + ", not " +
                       std::to_string(s));
    }
  }
}

}  // namespace

std::vector<HostEntry> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<HostEntry> hosts;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = source + ":" + std::to_string(number);
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto w = words(line);
    if (w.empty()) continue;
    HostEntry entry;
    entry.host = w[0];
    if (w.size() > 2 || (w.size() == 2 && w[1].rfind("slots=", 0) != 0)) {
      throw UsageError(where + ": expected `HOST slots=N`, got '" + line + "'");
    }
    if (w.size() == 2) {
      const auto n = to_int(w[1].substr(6));
      if (!n || *n <= 0) throw UsageError(where + ": '" + w[1] + "' is not a positive slot count");
      entry.slots = *n;
    }
    for (const auto& other : hosts) {
      if (other.host == entry.host) throw UsageError(where + ": host " + entry.host + " is listed twice");
    }
    hosts.push_back(std::move(entry));
  }
  if (hosts.empty()) throw UsageError(source + ": no hosts (expected lines like `worker-0 slots=8`)");
  return hosts;
}

std::vector<HostEntry> select_hosts(std::vector<HostEntry> hosts, const std::string& include,
                                    const std::string& exclude) {
  if (!include.empty() && !exclude.empty()) {
    throw UsageError("--include and --exclude cannot be combined (as in DeepSpeed): pick one");
  }
  if (include.empty() && exclude.empty()) return hosts;
  const bool including = !include.empty();
  const std::string flag = including ? "--include" : "--exclude";
  const auto filter = parse_filter(including ? include : exclude, flag);
  for (const auto& [host, slots] : filter) {
    const auto it =
        std::find_if(hosts.begin(), hosts.end(), [&name = host](const HostEntry& h) { return h.host == name; });
    if (it == hosts.end()) throw UsageError(flag + ": host " + host + " is not in the hostfile");
    check_slots(*it, slots, flag);
  }
  std::vector<HostEntry> out;
  for (auto& h : hosts) {
    const auto it = filter.find(h.host);
    if (including) {
      if (it == filter.end()) continue;
      h.picked = it->second;
    } else if (it != filter.end()) {
      if (it->second.empty()) continue;  // the whole host is excluded
      for (int s : all_slots(h)) {
        if (std::find(it->second.begin(), it->second.end(), s) == it->second.end()) h.picked.push_back(s);
      }
      if (h.picked.empty()) continue;
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) throw UsageError(flag + " '" + (including ? include : exclude) + "' leaves no host to run on");
  return out;
}

}  // namespace meshrun::launcher

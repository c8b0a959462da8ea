#include "proto/worker/hook_messages.hpp"

#include <charconv>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace meshrun::proto {
namespace {

constexpr std::string_view kPrefix = "fr ";

int64_t parse_number(std::string_view text, std::string_view datagram) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ProtocolError("bad number '" + std::string(text) + "' in hook message '" + std::string(datagram) + "'");
  }
  return value;
}

// Takes the next space-separated number off the front of `rest`.
int64_t take_number(std::string_view& rest, std::string_view datagram, const char* what) {
  const auto space = rest.find(' ');
  if (space == std::string_view::npos)
    throw ProtocolError(std::string("bad ") + what + " '" + std::string(datagram) + "'");
  const int64_t n = parse_number(rest.substr(0, space), datagram);
  rest.remove_prefix(space + 1);
  return n;
}

// "<verb> <rest>" -> {verb, rest}
std::pair<std::string_view, std::string_view> split_verb(std::string_view body) {
  const auto space = body.find(' ');
  if (space == std::string_view::npos) return {body, {}};
  return {body.substr(0, space), body.substr(space + 1)};
}

// "<group>:<enqueued>:<completed>"; the group name may itself hold ':' (it is everything before the last two).
std::pair<std::string, HookMessage::Group> parse_group(std::string_view field, std::string_view datagram) {
  const auto second = field.rfind(':');
  const auto first =
      second == std::string_view::npos || second == 0 ? std::string_view::npos : field.rfind(':', second - 1);
  if (first == std::string_view::npos || first == 0) {
    throw ProtocolError("bad group field '" + std::string(field) + "' in hook message '" + std::string(datagram) + "'");
  }
  return {std::string(field.substr(0, first)),
          HookMessage::Group{parse_number(field.substr(first + 1, second - first - 1), datagram),
                             parse_number(field.substr(second + 1), datagram)}};
}

// "pid=<pid> fr=on|off"; fields it does not know are skipped (a newer reporter may say more).
void parse_hello(std::string_view rest, std::string_view datagram, HookMessage& m) {
  for (const auto& field : split(std::string(rest), ' ')) {
    if (field.starts_with("pid=")) m.pid = parse_number(std::string_view(field).substr(4), datagram);
    if (field == "fr=off") m.recorder_on = false;
  }
}

void parse_status(std::string_view rest, std::string_view datagram, HookMessage& m) {
  for (const auto& field : split(std::string(rest), ' ')) {
    if (!field.empty()) m.groups.insert(parse_group(field, datagram));
  }
}

// "<agent ns> <worker ns>"
void parse_clock(std::string_view rest, std::string_view datagram, HookMessage& m) {
  const auto fields = split(std::string(rest), ' ');
  if (fields.size() != 2) throw ProtocolError("bad clock answer '" + std::string(datagram) + "'");
  m.sent_ns = parse_number(fields[0], datagram);
  m.remote_ns = parse_number(fields[1], datagram);
}

// "<first> <last> <count> <mean ns> <span ns> <group>" (the group last: it is the rest of the line)
void parse_arrivals(std::string_view rest, std::string_view datagram, HookMessage& m) {
  ArrivalAnswer& a = m.arrivals;
  a.first_seq = take_number(rest, datagram, "arrivals answer");
  a.last_seq = take_number(rest, datagram, "arrivals answer");
  a.count = take_number(rest, datagram, "arrivals answer");
  a.mean_ns = take_number(rest, datagram, "arrivals answer");
  a.span_ns = take_number(rest, datagram, "arrivals answer");
  if (rest.empty()) throw ProtocolError("arrivals answer without a group: '" + std::string(datagram) + "'");
  a.group = std::string(rest);
}

// {"frames": ["file:line in function", ...], "where": "..."}
void parse_frames(std::string_view rest, std::string_view datagram, HookMessage& m) {
  const auto j = nlohmann::json::parse(rest, nullptr, false);
  if (!j.is_object() || !j.contains("frames") || !j["frames"].is_array()) {
    throw ProtocolError("bad frames answer '" + std::string(datagram) + "'");
  }
  for (const auto& f : j["frames"]) {
    if (f.is_string()) m.frames.push_back(f.get<std::string>());
  }
  const auto where = j.find("where");
  if (where != j.end() && where->is_string()) m.where = where->get<std::string>();
}

}  // namespace

HookMessage HookMessage::hello(int64_t pid, bool recorder_on) {
  HookMessage m;
  m.kind = Kind::kHello;
  m.pid = pid;
  m.recorder_on = recorder_on;
  return m;
}

HookMessage HookMessage::status(std::map<std::string, Group> groups) {
  HookMessage m;
  m.kind = Kind::kStatus;
  m.groups = std::move(groups);
  return m;
}

HookMessage HookMessage::dumped(std::string path) {
  HookMessage m;
  m.kind = Kind::kDumped;
  m.text = std::move(path);
  return m;
}

HookMessage HookMessage::failed(std::string why) {
  HookMessage m;
  m.kind = Kind::kFailed;
  m.text = std::move(why);
  return m;
}

HookRequest HookRequest::dump(std::string path) {
  HookRequest r;
  r.kind = Kind::kDump;
  r.path = std::move(path);
  return r;
}

HookRequest HookRequest::clock(int64_t sent_ns) {
  HookRequest r;
  r.kind = Kind::kClock;
  r.sent_ns = sent_ns;
  return r;
}

HookRequest HookRequest::arrivals(int64_t first_seq, int64_t last_seq, std::string group) {
  HookRequest r;
  r.kind = Kind::kArrivals;
  r.first_seq = first_seq;
  r.last_seq = last_seq;
  r.group = std::move(group);
  return r;
}

HookRequest HookRequest::frames() { return HookRequest{}; }

bool is_hook_message(std::string_view datagram) { return datagram.starts_with(kPrefix); }

HookMessage parse_hook_message(std::string_view datagram) {
  if (!is_hook_message(datagram)) throw ProtocolError("not a hook message: '" + std::string(datagram) + "'");
  const auto [verb, rest] = split_verb(datagram.substr(kPrefix.size()));
  HookMessage m;
  using Kind = HookMessage::Kind;
  if (verb == "hello") {
    m.kind = Kind::kHello;
    parse_hello(rest, datagram, m);
  } else if (verb == "status") {
    m.kind = Kind::kStatus;
    parse_status(rest, datagram, m);
  } else if (verb == "clock") {
    m.kind = Kind::kClock;
    parse_clock(rest, datagram, m);
  } else if (verb == "arrivals") {
    m.kind = Kind::kArrivals;
    parse_arrivals(rest, datagram, m);
  } else if (verb == "frames") {
    m.kind = Kind::kFrames;
    parse_frames(rest, datagram, m);
  } else if (verb == "dumped" || verb == "failed") {
    m.kind = verb == "dumped" ? Kind::kDumped : Kind::kFailed;
    m.text = std::string(rest);
  } else {
    throw ProtocolError("unknown hook message '" + std::string(datagram) + "'");
  }
  return m;
}

std::string format_hook_message(const HookMessage& m) {
  using Kind = HookMessage::Kind;
  std::string out(kPrefix);
  switch (m.kind) {
    case Kind::kHello:
      out += "hello";
      if (m.pid != 0) out += " pid=" + std::to_string(m.pid);
      return out + (m.recorder_on ? " fr=on" : " fr=off");
    case Kind::kStatus:
      out += "status";
      for (const auto& [name, g] : m.groups) {
        out += " " + name + ":" + std::to_string(g.last_enqueued) + ":" + std::to_string(g.last_completed);
      }
      return out;
    case Kind::kDumped: return out + "dumped " + m.text;
    case Kind::kFailed: return out + "failed " + m.text;
    case Kind::kClock: return out + "clock " + std::to_string(m.sent_ns) + " " + std::to_string(m.remote_ns);
    case Kind::kArrivals: {
      const ArrivalAnswer& a = m.arrivals;
      return out + "arrivals " + std::to_string(a.first_seq) + " " + std::to_string(a.last_seq) + " " +
             std::to_string(a.count) + " " + std::to_string(a.mean_ns) + " " + std::to_string(a.span_ns) + " " +
             a.group;
    }
    case Kind::kFrames: return out + "frames " + nlohmann::json{{"frames", m.frames}, {"where", m.where}}.dump();
  }
  return out;
}

HookRequest parse_hook_request(std::string_view datagram) {
  const auto [verb, rest] = split_verb(datagram);
  HookRequest r;
  using Kind = HookRequest::Kind;
  if (verb == "dump" && !rest.empty()) {
    r.kind = Kind::kDump;
    r.path = std::string(rest);
  } else if (verb == "clock") {
    r.kind = Kind::kClock;
    r.sent_ns = parse_number(rest, datagram);
  } else if (verb == "arrivals") {
    r.kind = Kind::kArrivals;
    std::string_view fields = rest;
    r.first_seq = take_number(fields, datagram, "arrivals request");
    r.last_seq = take_number(fields, datagram, "arrivals request");
    if (fields.empty()) throw ProtocolError("arrivals request without a group: '" + std::string(datagram) + "'");
    r.group = std::string(fields);
  } else if (verb == "frames" && rest.empty()) {
    r.kind = Kind::kFrames;
  } else {
    throw ProtocolError("unknown hook request '" + std::string(datagram) + "'");
  }
  return r;
}

std::string format_hook_request(const HookRequest& r) {
  using Kind = HookRequest::Kind;
  switch (r.kind) {
    case Kind::kDump: return "dump " + r.path;
    case Kind::kClock: return "clock " + std::to_string(r.sent_ns);
    case Kind::kArrivals:
      return "arrivals " + std::to_string(r.first_seq) + " " + std::to_string(r.last_seq) + " " + r.group;
    case Kind::kFrames: return "frames";
  }
  return "frames";
}

}  // namespace meshrun::proto

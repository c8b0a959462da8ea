#include "launcher/hang/collective_watch.hpp"

#include <algorithm>
#include <charconv>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace meshrun::launcher {
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

// "<agent ns> <worker ns>"
void parse_clock(std::string_view rest, std::string_view datagram, HookMessage& m) {
  const auto fields = split(std::string(rest), ' ');
  if (fields.size() != 2) throw ProtocolError("bad clock answer '" + std::string(datagram) + "'");
  m.sent_ns = parse_number(fields[0], datagram);
  m.remote_ns = parse_number(fields[1], datagram);
}

// "<first> <last> <count> <mean ns> <span ns> <group>" (the group last: it is the rest of the line)
void parse_arrivals(std::string_view rest, std::string_view datagram, HookMessage& m) {
  int64_t numbers[5];
  for (auto& n : numbers) {
    const auto space = rest.find(' ');
    if (space == std::string_view::npos) throw ProtocolError("bad arrivals answer '" + std::string(datagram) + "'");
    n = parse_number(rest.substr(0, space), datagram);
    rest.remove_prefix(space + 1);
  }
  if (rest.empty()) throw ProtocolError("arrivals answer without a group: '" + std::string(datagram) + "'");
  m.arrivals = ArrivalAnswer{std::string(rest), numbers[0], numbers[1], numbers[2], numbers[3], numbers[4]};
}

}  // namespace

bool is_hook_message(std::string_view datagram) { return datagram.starts_with(kPrefix); }

HookMessage parse_hook_message(std::string_view datagram) {
  if (!is_hook_message(datagram)) throw ProtocolError("not a hook message: '" + std::string(datagram) + "'");
  const std::string_view body = datagram.substr(kPrefix.size());
  const auto space = body.find(' ');
  const std::string_view verb = body.substr(0, space);
  const std::string_view rest = space == std::string_view::npos ? std::string_view() : body.substr(space + 1);
  HookMessage m;
  if (verb == "hello") {
    m.kind = HookMessage::Kind::kHello;
    m.recorder_on = rest.find("fr=off") == std::string_view::npos;
  } else if (verb == "status") {
    m.kind = HookMessage::Kind::kStatus;
    for (const auto& field : split(std::string(rest), ' ')) {
      if (!field.empty()) m.groups.insert(parse_group(field, datagram));
    }
  } else if (verb == "clock") {
    m.kind = HookMessage::Kind::kClock;
    parse_clock(rest, datagram, m);
  } else if (verb == "arrivals") {
    m.kind = HookMessage::Kind::kArrivals;
    parse_arrivals(rest, datagram, m);
  } else if (verb == "frames") {
    m.kind = HookMessage::Kind::kFrames;
    const auto j = nlohmann::json::parse(rest, nullptr, false);
    if (!j.is_object() || !j.contains("frames") || !j["frames"].is_array()) {
      throw ProtocolError("bad frames answer '" + std::string(datagram) + "'");
    }
    for (const auto& f : j["frames"]) {
      if (f.is_string()) m.frames.push_back(f.get<std::string>());
    }
    const auto where = j.find("where");
    if (where != j.end() && where->is_string()) m.where = where->get<std::string>();
  } else if (verb == "dumped" || verb == "failed") {
    m.kind = verb == "dumped" ? HookMessage::Kind::kDumped : HookMessage::Kind::kFailed;
    m.text = std::string(rest);
  } else {
    throw ProtocolError("unknown hook message '" + std::string(datagram) + "'");
  }
  return m;
}

void CollectiveWatch::on_message(const HookMessage& message, Clock::time_point now, int64_t received_ns) {
  hooked_ = true;
  switch (message.kind) {
    case HookMessage::Kind::kHello: recorder_on_ = message.recorder_on; return;
    case HookMessage::Kind::kDumped:
    case HookMessage::Kind::kFailed: dump_answer_ = message; return;
    case HookMessage::Kind::kClock: clock_.add(message.sent_ns, message.remote_ns, received_ns); return;
    case HookMessage::Kind::kArrivals: arrivals_ = message.arrivals; return;
    case HookMessage::Kind::kFrames:
      stack_reads_.push_back(StackRead{now, message.frames, message.where});
      if (stack_reads_.size() > kStackReads) stack_reads_.pop_front();
      return;
    case HookMessage::Kind::kStatus: break;
  }
  bool completed = false;
  for (const auto& [name, g] : message.groups) {
    GroupState& state = groups_[name];
    // Sequence numbers start at 1: a first status with 0 completed reports none (not a completion at -1 -> 0).
    if (g.last_completed > std::max<int64_t>(state.last.last_completed, 0)) completed = true;
    const bool open = g.last_enqueued > g.last_completed;
    const bool same_wait = state.open_since && g.last_completed == state.last.last_completed;
    if (!open) {
      state.open_since.reset();
    } else if (!same_wait) {
      state.open_since = now;
    }
    state.last = g;
  }
  if (!completed) return;
  completions_ = 0;
  for (const auto& [name, state] : groups_) completions_ += std::max<int64_t>(0, state.last.last_completed);
  if (last_completion_) {
    gaps_s_.push_back(std::chrono::duration<double>(now - *last_completion_).count());
    if (gaps_s_.size() > kWindow) gaps_s_.pop_front();
  }
  last_completion_ = now;
}

StackMotion CollectiveWatch::stack_motion(Clock::time_point since) const {
  StackMotion m;
  const StackRead* first = nullptr;
  for (const auto& read : stack_reads_) {
    if (read.at < since) continue;
    if (first == nullptr) {
      first = &read;
      continue;
    }
    m.known = true;
    if (read.frames != first->frames) m.moved = true;
  }
  if (!stack_reads_.empty()) m.where = stack_reads_.back().where;
  return m;
}

std::map<std::string, int64_t> CollectiveWatch::completed() const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, state] : groups_) out[name] = state.last.last_completed;
  return out;
}

int64_t CollectiveWatch::last_enqueued(const std::string& group) const {
  const auto it = groups_.find(group);
  return it == groups_.end() ? -1 : it->second.last.last_enqueued;
}

std::optional<double> CollectiveWatch::median_gap_s() const {
  if (gaps_s_.empty()) return std::nullopt;
  std::vector<double> sorted(gaps_s_.begin(), gaps_s_.end());
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<long>(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

std::optional<CollectiveWatch::OpenWait> CollectiveWatch::oldest_wait() const {
  std::optional<OpenWait> oldest;
  for (const auto& [name, state] : groups_) {
    if (!state.open_since) continue;
    if (!oldest || *state.open_since < oldest->since) {
      oldest = OpenWait{name, std::max<int64_t>(state.last.last_completed, 0) + 1, *state.open_since};
    }
  }
  return oldest;
}

}  // namespace meshrun::launcher

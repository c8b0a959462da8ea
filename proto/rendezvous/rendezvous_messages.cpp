// Wire names of the rendezvous enums: one table per enum, read in both directions, so a name cannot be
// written one way and parsed another.
#include "proto/rendezvous/rendezvous_messages.hpp"

#include <array>
#include <cstdio>
#include <utility>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

using namespace std::string_view_literals;

template <typename Enum>
struct WireNames;  // `kField` names the field in errors; `kNames` pairs every value with its JSON string

template <>
struct WireNames<AwaitStatus> {
  static constexpr std::string_view kField = "await status";
  static constexpr std::array kNames = {
      std::pair{AwaitStatus::kWaiting, "waiting"sv}, std::pair{AwaitStatus::kAssigned, "assigned"sv},
      std::pair{AwaitStatus::kFailed, "failed"sv}, std::pair{AwaitStatus::kFinished, "finished"sv}};
};

template <>
struct WireNames<HeartbeatAction> {
  static constexpr std::string_view kField = "heartbeat action";
  static constexpr std::array kNames = {std::pair{HeartbeatAction::kContinue, "continue"sv},
                                        std::pair{HeartbeatAction::kRestart, "restart"sv},
                                        std::pair{HeartbeatAction::kFail, "fail"sv}};
};

template <>
struct WireNames<RestartCause> {
  static constexpr std::string_view kField = "restart cause";
  static constexpr std::array kNames = {std::pair{RestartCause::kNone, ""sv},
                                        std::pair{RestartCause::kNodeLost, "node_lost"sv},
                                        std::pair{RestartCause::kWorkerFailed, "worker_failed"sv},
                                        std::pair{RestartCause::kNodeLeft, "node_left"sv},
                                        std::pair{RestartCause::kScaleUp, "scale_up"sv},
                                        std::pair{RestartCause::kHung, "hung"sv},
                                        std::pair{RestartCause::kSlowNode, "slow_node"sv}};
};
template <>
struct WireNames<LoadSource> {
  static constexpr std::string_view kField = "load source";
  static constexpr std::array kNames = {std::pair{LoadSource::kUnknown, ""sv}, std::pair{LoadSource::kFresh, "fresh"sv},
                                        std::pair{LoadSource::kMemory, "memory"sv},
                                        std::pair{LoadSource::kMemoryBuddy, "memory (buddy)"sv},
                                        std::pair{LoadSource::kStorage, "storage"sv}};
};

template <>
struct WireNames<RunState> {
  static constexpr std::string_view kField = "run state";
  static constexpr std::array kNames = {std::pair{RunState::kOpen, "open"sv}, std::pair{RunState::kClosed, "closed"sv},
                                        std::pair{RunState::kFinished, "finished"sv},
                                        std::pair{RunState::kFailed, "failed"sv}};
};

template <>
struct WireNames<StragglerMeasure> {
  static constexpr std::string_view kField = "straggler measure";
  static constexpr std::array kNames = {std::pair{StragglerMeasure::kCompute, "compute"sv},
                                        std::pair{StragglerMeasure::kArrivals, "arrivals"sv},
                                        std::pair{StragglerMeasure::kStepTime, "step_time"sv}};
};

template <typename Enum>
std::string_view name_of(Enum value) {
  for (const auto& [candidate, name] : WireNames<Enum>::kNames) {
    if (candidate == value) return name;
  }
  return "?";  // only a value cast from outside the enum gets here
}

template <typename Enum>
Enum parse(std::string_view text) {
  std::string known;
  for (const auto& [value, name] : WireNames<Enum>::kNames) {
    if (name == text) return value;
    known += (known.empty() ? "'" : ", '") + std::string(name) + "'";
  }
  throw ProtocolError("unknown " + std::string(WireNames<Enum>::kField) + " '" + std::string(text) +
                      "' in a rendezvous message (known: " + known + "; is the peer another meshrun version?)");
}

template <typename Enum>
void read_json(const nlohmann::json& j, Enum& value) {
  if (!j.is_string()) {
    throw ProtocolError(std::string(WireNames<Enum>::kField) + " in a rendezvous message is a " + j.type_name() +
                        ", not a string");
  }
  value = parse<Enum>(j.get_ref<const std::string&>());
}

}  // namespace

std::string_view to_string(AwaitStatus value) { return name_of(value); }
std::string_view to_string(HeartbeatAction value) { return name_of(value); }
std::string_view to_string(RestartCause value) { return name_of(value); }
std::string_view to_string(LoadSource value) { return name_of(value); }
std::string_view to_string(RunState value) { return name_of(value); }

std::string describe(const RecoveryLedger& l) {
  const std::pair<const char*, double> phases[] = {
      {"detect", l.detect_s}, {"stop", l.stop_s}, {"rendezvous", l.rendezvous_s}, {"start", l.start_s},
      {"init", l.init_s},     {"load", l.load_s}, {"first step", l.first_step_s}};
  std::string parts;
  for (const auto& [name, seconds] : phases) {
    if (seconds < 0) break;
    char part[48];
    std::snprintf(part, sizeof part, "%s%s %.1f s", parts.empty() ? "" : ", ", name, seconds);
    parts += part;
    if (std::string_view(name) == "load" && l.load_source != LoadSource::kUnknown)
      parts += " from " + std::string(to_string(l.load_source));
  }
  char head[96];
  std::snprintf(head, sizeof head, l.complete ? "%.1f s from the fault to the first step: " : "%.1f s so far: ",
                l.total_s < 0 ? 0.0 : l.total_s);
  return head + (parts.empty() ? std::string("nothing reached yet") : parts);
}

template <>
AwaitStatus from_string<AwaitStatus>(std::string_view text) {
  return parse<AwaitStatus>(text);
}
template <>
HeartbeatAction from_string<HeartbeatAction>(std::string_view text) {
  return parse<HeartbeatAction>(text);
}
template <>
RestartCause from_string<RestartCause>(std::string_view text) {
  return parse<RestartCause>(text);
}
template <>
RunState from_string<RunState>(std::string_view text) {
  return parse<RunState>(text);
}
template <>
LoadSource from_string<LoadSource>(std::string_view text) {
  return parse<LoadSource>(text);
}

void to_json(nlohmann::json& j, AwaitStatus value) { j = std::string(name_of(value)); }
void to_json(nlohmann::json& j, HeartbeatAction value) { j = std::string(name_of(value)); }
void to_json(nlohmann::json& j, RestartCause value) { j = std::string(name_of(value)); }
void to_json(nlohmann::json& j, LoadSource value) { j = std::string(name_of(value)); }
void to_json(nlohmann::json& j, RunState value) { j = std::string(name_of(value)); }
void to_json(nlohmann::json& j, StragglerMeasure value) { j = std::string(name_of(value)); }
void from_json(const nlohmann::json& j, AwaitStatus& value) { read_json(j, value); }
void from_json(const nlohmann::json& j, HeartbeatAction& value) { read_json(j, value); }
void from_json(const nlohmann::json& j, RestartCause& value) { read_json(j, value); }
void from_json(const nlohmann::json& j, LoadSource& value) { read_json(j, value); }
void from_json(const nlohmann::json& j, RunState& value) { read_json(j, value); }
void from_json(const nlohmann::json& j, StragglerMeasure& value) { read_json(j, value); }

}  // namespace meshrun::proto

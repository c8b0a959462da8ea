#include "launcher/hang/collective_record.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace meshrun::launcher {

const CollectiveEntry* RankRecord::entry(const std::string& group, int64_t seq) const {
  for (const auto& e : entries) {
    if (e.group == group && e.seq == seq) return &e;
  }
  return nullptr;
}

std::string_view to_string(ProcessState value) {
  switch (value) {
    case ProcessState::kRunning: return "running";
    case ProcessState::kStopped: return "stopped";
    case ProcessState::kExited: return "exited";
  }
  return "running";
}

std::string_view to_string(RecordSource value) {
  switch (value) {
    case RecordSource::kRecorded: return "recorded";
    case RecordSource::kNoHook: return "no_hook";
    case RecordSource::kRecorderOff: return "recorder_off";
    case RecordSource::kNoProcessGroup: return "no_process_group";
    case RecordSource::kNoAnswer: return "no_answer";
  }
  return "no_hook";
}

namespace {

template <typename Enum, size_t N>
Enum parse_enum(const std::string& text, const Enum (&values)[N], const char* what) {
  for (Enum v : values) {
    if (to_string(v) == text) return v;
  }
  throw ProtocolError(std::string("unknown ") + what + " '" + text + "' in a hang record");
}

constexpr ProcessState kStates[] = {ProcessState::kRunning, ProcessState::kStopped, ProcessState::kExited};
constexpr RecordSource kSources[] = {RecordSource::kRecorded, RecordSource::kNoHook, RecordSource::kRecorderOff,
                                     RecordSource::kNoProcessGroup, RecordSource::kNoAnswer};

nlohmann::json entry_json(const CollectiveEntry& e) {
  return {{"group", e.group},     {"seq", e.seq},       {"op", e.op},
          {"sizes", e.sizes},     {"dtypes", e.dtypes}, {"created_ms", e.created_unix_ms},
          {"retired", e.retired}, {"frames", e.frames}};
}

CollectiveEntry entry_from(const nlohmann::json& j) {
  CollectiveEntry e;
  e.group = j.at("group").get<std::string>();
  e.seq = j.at("seq").get<int64_t>();
  e.op = j.at("op").get<std::string>();
  e.sizes = j.value("sizes", "");
  e.dtypes = j.value("dtypes", "");
  e.created_unix_ms = j.value("created_ms", int64_t{0});
  e.retired = j.value("retired", false);
  if (const auto f = j.find("frames"); f != j.end()) {
    for (const auto& frame : *f) {
      // The hook writes [file, line, function]; the agents exchange "file:line in function".
      if (frame.is_string()) {
        e.frames.push_back(frame.get<std::string>());
      } else {
        e.frames.push_back(frame.at(0).get<std::string>() + ":" + std::to_string(frame.at(1).get<int64_t>()) + " in " +
                           frame.at(2).get<std::string>());
      }
    }
  }
  return e;
}

GroupProgress group_from(const nlohmann::json& j) {
  GroupProgress g;
  g.ranks = j.value("ranks", std::vector<int>{});
  g.last_enqueued = j.value("last_enqueued", int64_t{-1});
  g.last_completed = j.value("last_completed", int64_t{-1});
  return g;
}

}  // namespace

void to_json(nlohmann::json& j, const RankRecord& r) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, g] : r.groups) {
    groups[name] = {{"ranks", g.ranks}, {"last_enqueued", g.last_enqueued}, {"last_completed", g.last_completed}};
  }
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : r.entries) entries.push_back(entry_json(e));
  j = {{"rank", r.rank},
       {"local_rank", r.local_rank},
       {"node", r.node},
       {"host", r.host},
       {"pid", r.pid},
       {"state", to_string(r.state)},
       {"source", to_string(r.source)},
       {"source_detail", r.source_detail},
       {"beat_step", r.beat_step},
       {"groups", groups},
       {"entries", entries},
       {"activity", r.activity}};
}

void from_json(const nlohmann::json& j, RankRecord& r) {
  r.rank = j.at("rank").get<int>();
  r.local_rank = j.value("local_rank", 0);
  r.node = j.value("node", 0);
  r.host = j.value("host", "");
  r.pid = j.value("pid", 0);
  r.state = parse_enum(j.value("state", "running"), kStates, "process state");
  r.source = parse_enum(j.value("source", "no_hook"), kSources, "record source");
  r.source_detail = j.value("source_detail", "");
  r.beat_step = j.value("beat_step", int64_t{-1});
  // value() returns a copy: keep it alive for the loops.
  const nlohmann::json groups = j.value("groups", nlohmann::json::object());
  const nlohmann::json entries = j.value("entries", nlohmann::json::array());
  r.groups.clear();
  for (const auto& [name, g] : groups.items()) r.groups[name] = group_from(g);
  r.entries.clear();
  for (const auto& e : entries) r.entries.push_back(entry_from(e));
  r.activity = j.value("activity", Activity{});
}

void read_hook_dump(const std::string& text, RankRecord& record) {
  try {
    const auto j = nlohmann::json::parse(text);
    const std::string fr = j.value("fr", "on");
    if (fr == "off") {
      record.source = RecordSource::kRecorderOff;
      record.source_detail = "TORCH_FR_BUFFER_SIZE=0 turns PyTorch's Flight Recorder off";
      return;
    }
    if (fr == "no_process_group") {
      record.source = RecordSource::kNoProcessGroup;
      record.source_detail = "no process group is initialised";
      return;
    }
    record.groups.clear();
    for (const auto& [name, g] : j.at("groups").items()) record.groups[name] = group_from(g);
    record.entries.clear();
    for (const auto& e : j.at("entries")) record.entries.push_back(entry_from(e));
    record.source = RecordSource::kRecorded;
  } catch (const nlohmann::json::exception& e) {
    throw ProtocolError(std::string("malformed collective record from meshrun's hook: ") + e.what());
  }
}

}  // namespace meshrun::launcher

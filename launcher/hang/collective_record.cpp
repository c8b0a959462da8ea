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

}  // namespace

void to_json(nlohmann::json& j, const RankRecord& r) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, g] : r.groups) groups[name] = g;
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
       {"entries", r.entries},
       {"activity", r.activity},
       {"wait", r.wait}};
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
  for (const auto& [name, g] : groups.items()) r.groups[name] = g.get<GroupProgress>();
  r.entries.clear();
  for (const auto& e : entries) r.entries.push_back(e.get<CollectiveEntry>());
  r.activity = j.value("activity", Activity{});
  r.wait = j.value("wait", RankWait{});
}

void read_hook_dump(const std::string& text, RankRecord& record) {
  proto::CollectiveDump dump = proto::parse_collective_dump(text);
  record.threads.clear();
  for (auto& t : dump.threads) {
    record.threads.push_back(
        PythonThread{t.tid, std::move(t.name), std::move(t.frames), std::move(t.where), std::move(t.call), t.meshrun});
  }
  switch (dump.recorder) {
    case proto::RecorderState::kOff:
      record.source = RecordSource::kRecorderOff;
      record.source_detail = "TORCH_FR_BUFFER_SIZE=0 turns PyTorch's Flight Recorder off";
      return;
    case proto::RecorderState::kNoProcessGroup:
      record.source = RecordSource::kNoProcessGroup;
      record.source_detail = "no process group is initialised";
      return;
    case proto::RecorderState::kOn: break;
  }
  record.groups = std::move(dump.groups);
  record.entries = std::move(dump.entries);
  record.source = RecordSource::kRecorded;
}

}  // namespace meshrun::launcher

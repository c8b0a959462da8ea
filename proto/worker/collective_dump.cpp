#include "proto/worker/collective_dump.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

using nlohmann::json;

std::string_view recorder_word(RecorderState state) {
  switch (state) {
    case RecorderState::kOn: return "on";
    case RecorderState::kOff: return "off";
    case RecorderState::kNoProcessGroup: return "no_process_group";
  }
  return "on";
}

// A word this build does not know (a newer hook's) is read as "on": its groups and entries are read as ever.
RecorderState recorder_state(const std::string& word) {
  if (word == "off") return RecorderState::kOff;
  if (word == "no_process_group") return RecorderState::kNoProcessGroup;
  return RecorderState::kOn;
}

// The Python hook's [file, line, function], or the text form as it is.
std::string frame_text(const json& frame) {
  if (frame.is_string()) return frame.get<std::string>();
  return frame.at(0).get<std::string>() + ":" + std::to_string(frame.at(1).get<int64_t>()) + " in " +
         frame.at(2).get<std::string>();
}

}  // namespace

void to_json(json& j, const GroupProgress& g) {
  j = {{"ranks", g.ranks}, {"last_enqueued", g.last_enqueued}, {"last_completed", g.last_completed}};
}

void from_json(const json& j, GroupProgress& g) {
  g.ranks = j.value("ranks", std::vector<int>{});
  g.last_enqueued = j.value("last_enqueued", int64_t{-1});
  g.last_completed = j.value("last_completed", int64_t{-1});
}

void to_json(json& j, const CollectiveEntry& e) {
  j = {{"group", e.group},     {"seq", e.seq},       {"op", e.op},
       {"sizes", e.sizes},     {"dtypes", e.dtypes}, {"created_ms", e.created_unix_ms},
       {"retired", e.retired}, {"frames", e.frames}};
}

void from_json(const json& j, CollectiveEntry& e) {
  e.group = j.at("group").get<std::string>();
  e.seq = j.at("seq").get<int64_t>();
  e.op = j.at("op").get<std::string>();
  e.sizes = j.value("sizes", "");
  e.dtypes = j.value("dtypes", "");
  e.created_unix_ms = j.value("created_ms", int64_t{0});
  e.retired = j.value("retired", false);
  e.frames.clear();
  if (const auto f = j.find("frames"); f != j.end()) {
    for (const auto& frame : *f) e.frames.push_back(frame_text(frame));
  }
}

void to_json(json& j, const ThreadFrames& t) {
  j = {{"tid", t.tid},     {"name", t.name}, {"frames", t.frames},
       {"where", t.where}, {"call", t.call}, {"meshrun", t.meshrun}};
}

void from_json(const json& j, ThreadFrames& t) {
  t.tid = j.at("tid").get<int64_t>();
  t.name = j.value("name", "");
  t.frames.clear();
  if (const auto f = j.find("frames"); f != j.end()) {
    for (const auto& frame : *f) t.frames.push_back(frame_text(frame));
  }
  t.where = j.value("where", "");
  t.call = j.value("call", "");
  t.meshrun = j.value("meshrun", false);
}

CollectiveDump parse_collective_dump(std::string_view text) {
  try {
    const auto j = json::parse(text);
    CollectiveDump dump;
    dump.recorder = recorder_state(j.value("fr", "on"));
    dump.pid = j.value("pid", int64_t{0});
    if (const auto t = j.find("threads"); t != j.end()) {
      for (const auto& thread : *t) dump.threads.push_back(thread.get<ThreadFrames>());
    }
    if (dump.recorder != RecorderState::kOn) return dump;
    for (const auto& [name, g] : j.at("groups").items()) dump.groups[name] = g.get<GroupProgress>();
    for (const auto& e : j.at("entries")) dump.entries.push_back(e.get<CollectiveEntry>());
    return dump;
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("malformed collective record: ") + e.what());
  }
}

std::string format_collective_dump(const CollectiveDump& dump) {
  json j = {{"fr", recorder_word(dump.recorder)}};
  if (dump.pid != 0) j["pid"] = dump.pid;
  if (!dump.threads.empty()) j["threads"] = dump.threads;
  if (dump.recorder == RecorderState::kOn) {
    j["groups"] = json::object();
    for (const auto& [name, g] : dump.groups) j["groups"][name] = g;
    j["entries"] = dump.entries;
  }
  return j.dump();
}

}  // namespace meshrun::proto

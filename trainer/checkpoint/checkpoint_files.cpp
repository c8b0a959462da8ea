#include "trainer/checkpoint/checkpoint_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "trainer/faults/fault_hooks.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Test hooks (trainer/fault_hooks.hpp), MESHRUN_TRAINER_FAULT_<NAME>_IN_SAVE=STEP:RANK:
//   KILL       that rank SIGKILLs itself halfway through writing its data file at that step (the crash the
//              save protocol must survive);
//   DISK_FULL  that rank's data file is a link to /dev/full, so its writes fail with ENOSPC, the real error
//              of a full disk (the failure every rank must stop on, naming the rank);
//   STALL      =STEP:RANK:SECONDS: that rank's write stalls that long halfway (a slow file system; the others
//              wait for it at the save's agreement, so the whole save takes that much longer).
FaultSite fault_site(const SaveSite& site) { return {site.step, site.rank}; }

// The path the data file is opened at, after the disk-full hook has had its say.
std::string data_file_path(const std::string& path, const std::string& file, const SaveSite& site) {
  const std::string target = (fs::path(path) / file).string();
  if (fault_at("MESHRUN_TRAINER_FAULT_DISK_FULL_IN_SAVE", fault_site(site))) {
    if (::symlink("/dev/full", (target + ".tmp").c_str()) != 0)
      throw Error("test hook: cannot link " + target + ".tmp to /dev/full: " + std::strerror(errno));
  }
  return target;
}

// Removes all but the newest keep_last complete checkpoints, and incomplete folders older than `newest`
// (debris of interrupted saves). Only folders with metadata.json count as checkpoints.
void prune(const std::string& dir, int64_t keep_last, int64_t newest) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto step = step_of_folder(e.path().filename().string());
    if (!step || !e.is_directory()) continue;
    if (fs::exists(e.path() / "metadata.json")) {
      complete.emplace_back(*step, e.path());
    } else if (*step < newest) {
      fs::remove_all(e.path());
    }
  }
  if (keep_last <= 0 || static_cast<int64_t>(complete.size()) <= keep_last) return;
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < complete.size(); ++i) {
    // metadata first: an interrupted removal leaves an incomplete folder, never a half-deleted "complete" one.
    fs::remove(complete[i].second / "metadata.json");
    fs::remove_all(complete[i].second);
  }
}

// <path>/rank<R>.index.json: where a rank leaves its index for rank 0 (sharded format).
fs::path rank_index_path(const std::string& path, int rank) {
  return fs::path(path) / ("rank" + std::to_string(rank) + ".index.json");
}

// The indexes metadata.json is built from: `own_index` alone (full format), else every rank's index file.
std::vector<json> collect_indexes(const std::string& path, int world_size, const json* own_index) {
  std::vector<json> indexes;
  if (own_index != nullptr) {
    indexes.push_back(*own_index);
    return indexes;
  }
  for (int r = 0; r < world_size; ++r) {
    const fs::path p = rank_index_path(path, r);
    if (fs::exists(p)) indexes.push_back(read_json_file(p.string()));
  }
  return indexes;
}

// metadata.json's "files" and "tensors", merged from the ranks' indexes.
struct CheckpointContents {
  json files = json::object();
  json tensors;
  int64_t total_bytes = 0;  // of the data files
};

CheckpointContents merge_indexes(const std::vector<json>& indexes, json tensors) {
  CheckpointContents contents;
  contents.tensors = std::move(tensors);
  for (const auto& idx : indexes) {
    contents.files[idx["file"].get<std::string>()] = {{"bytes", idx["bytes"]}};
    contents.total_bytes += idx["bytes"].get<int64_t>();
    for (auto it = idx["chunks"].begin(); it != idx["chunks"].end(); ++it) {
      auto& list = contents.tensors.at(it.key())["chunks"];
      for (const auto& c : it.value()) list.push_back(c);
    }
  }
  return contents;
}

// metadata.json: the save record, the resolved config and where every chunk of every tensor lies.
json metadata_json(const TrainerConfig& config, const SaveRecord& record, const CheckpointContents& contents) {
  json meta = {
      {"format_version", kCheckpointFormatVersion},
      {"step", record.step},
      {"optimizer_steps", record.optimizer_steps},
      // Training draws no random numbers after init: the data position is a function of (train.seed, step)
      // and the learning rate of step, so these two integers are the whole RNG and schedule state.
      {"seed", config.train.seed},
      {"saved_with",
       {{"world_size", record.world_size},
        {"strategy", to_string(config.fsdp.strategy)},
        {"layout", record.layout},
        {"format", config.checkpoint.format}}},
      {"model", config.merged.at("model")},
      {"config", config.merged},
      {"files", contents.files},
      {"tensors", contents.tensors},
  };
  if (!config.hf_config.is_null()) meta["hf_config"] = config.hf_config;  // model.init_from's, for export
  return meta;
}

}  // namespace

void check_chunks_tile(json& tensors) {
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    auto& list = it.value()["chunks"];
    std::sort(list.begin(), list.end(), [](const json& a, const json& b) { return a["begin"] < b["begin"]; });
    int64_t next = 0;
    for (const auto& c : list) {
      if (c["begin"].get<int64_t>() != next)
        throw Error("internal: checkpoint chunks of " + it.key() + " do not tile it");
      next += c["count"].get<int64_t>();
    }
    int64_t numel = 1;
    for (const auto& d : it.value()["shape"]) numel *= d.get<int64_t>();
    if (next != numel)
      throw Error("internal: checkpoint chunks of " + it.key() + " cover " + std::to_string(next) + " of " +
                  std::to_string(numel));
  }
}

json empty_tensor_table(const ModelConfig& model) {
  json tensors = json::object();
  for (const auto& unit : build_unit_specs(model)) {
    for (const auto* kind : kCheckpointKinds) {
      for (const auto& p : unit.params)
        tensors[global_name(kind, unit, p)] = {{"shape", p.shape}, {"dtype", "float32"}, {"chunks", json::array()}};
    }
  }
  return tensors;
}

std::string step_dir(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::optional<int64_t> step_of_folder(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  }
  return std::stoll(name.substr(5));
}

std::string global_name(const char* kind, const UnitSpec& unit, const ParamSpec& param) {
  return std::string(kind) + "." + unit.name + "." + param.name;
}

void prepare_step_dir(const std::string& dir, const std::string& path) {
  fs::create_directories(dir);
  if (fs::exists(path)) {
    fs::remove(fs::path(path) / "metadata.json");  // no longer complete from here on
    fsync_dir(path);
    fs::remove_all(path);
  }
  // The new folder's own entry becomes durable with the fsync of `dir` after metadata.json.
  fs::create_directories(path);
}

void ChunkIndex::add(int kind, const UnitSpec& unit, const ParamSlice& slice, uint64_t offset, uint32_t crc) {
  chunks_[global_name(kCheckpointKinds[kind], unit, slice.param)].push_back(
      {{"file", file_}, {"offset", offset}, {"begin", slice.begin}, {"count", slice.count}, {"crc32", crc}});
}

json ChunkIndex::to_json(uint64_t bytes) && {
  return {{"file", file_}, {"bytes", bytes}, {"chunks", std::move(chunks_)}};
}

ShardFileWriter::ShardFileWriter(const std::string& path, const std::string& file, SaveSite site)
    : site_(site), file_(data_file_path(path, file, site)), index_(file) {}

void ShardFileWriter::append(const UnitSpec& unit, size_t unit_index, int kind, const float* data, int64_t base,
                             int64_t lo, int64_t hi) {
  for_each_param_slice(unit, lo, hi, [&](const ParamSlice& slice) {
    const uint64_t at = file_.bytes_written();
    index_.add(kind, unit, slice, at,
               file_.write(data + (slice.at - base), static_cast<size_t>(slice.count) * sizeof(float)));
  });
  if (unit_index != site_.units / 2 || kind != 0) return;
  kill_if_asked("MESHRUN_TRAINER_FAULT_KILL_IN_SAVE", fault_site(site_));
  stall_if_asked("MESHRUN_TRAINER_FAULT_STALL_IN_SAVE", fault_site(site_));
}

json ShardFileWriter::commit() {
  file_.commit();
  return std::move(index_).to_json(file_.bytes_written());
}

void write_rank_index(const std::string& path, int rank, const json& index) {
  write_file_atomic(rank_index_path(path, rank).string(), index.dump());
}

int64_t finish_checkpoint(const TrainerConfig& config, const std::string& path, const SaveRecord& record,
                          const json* own_index) {
  const std::vector<json> indexes = collect_indexes(path, record.world_size, own_index);
  CheckpointContents contents = merge_indexes(indexes, empty_tensor_table(config.model));
  check_chunks_tile(contents.tensors);
  const auto& cc = config.checkpoint;
  write_file_atomic((fs::path(path) / "metadata.json").string(), metadata_json(config, record, contents).dump(1));
  for (int r = 0; r < record.world_size; ++r) fs::remove(rank_index_path(path, r));
  fsync_dir(cc.dir);
  prune(cc.dir, cc.keep_last, record.step);
  return contents.total_bytes;
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + " is not valid JSON (corrupted checkpoint metadata)");
  return j;
}

}  // namespace meshrun::trainer

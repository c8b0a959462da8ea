#include "trainer/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "trainer/checkpoint/atomic_file.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kFormatVersion = 1;
// The tensor kinds a checkpoint holds per parameter, and the prefix of their global names.
constexpr const char* kKinds[] = {"model", "optim.exp_avg", "optim.exp_avg_sq"};

std::string step_dir(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::optional<int64_t> step_of(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.rfind("step_", 0) != 0 || n.size() == 5) return std::nullopt;
  for (size_t i = 5; i < n.size(); ++i) {
    if (n[i] < '0' || n[i] > '9') return std::nullopt;
  }
  return std::stoll(n.substr(5));
}

std::string global_name(const char* kind, const UnitSpec& unit, const ParamSpec& p) {
  return std::string(kind) + "." + unit.name + "." + p.name;
}

at::Tensor& kind_tensor(FlatParamUnit& unit, AdamW& optimizer, size_t index, int kind) {
  if (kind == 0) return unit.shard();
  return kind == 1 ? optimizer.exp_avg(index) : optimizer.exp_avg_sq(index);
}

// The real (unpadded) part of this rank's chunk of a unit, as unit-flat element indices [lo, hi).
std::pair<int64_t, int64_t> local_range(const FlatParamUnit& u) {
  const int64_t lo = std::min(u.shard_offset(), u.numel());
  return {lo, std::min(u.shard_offset() + u.shard_numel(), u.numel())};
}

// Test hook: MESHRUN_TRAINER_FAULT_KILL_IN_SAVE=STEP:RANK makes that rank SIGKILL itself halfway through
// writing its data file at that step (the crash the save protocol must survive).
bool fault_kill_in_save(int64_t step, int rank) {
  const char* v = std::getenv("MESHRUN_TRAINER_FAULT_KILL_IN_SAVE");
  return v != nullptr && std::string(v) == std::to_string(step) + ":" + std::to_string(rank);
}

// Appends elements [lo, hi) of a unit tensor (data[0] is unit element `base`) and records one chunk per
// parameter it touches.
void write_unit_range(AtomicFile& f, const std::string& file, const UnitSpec& spec, const char* kind, const float* data,
                      int64_t base, int64_t lo, int64_t hi, json& chunks) {
  int64_t offset = 0;
  for (const auto& p : spec.params) {
    const int64_t s = std::max(lo, offset);
    const int64_t e = std::min(hi, offset + p.numel());
    if (s < e) {
      const uint64_t at = f.bytes_written();
      const uint32_t crc = f.write(data + (s - base), static_cast<size_t>(e - s) * sizeof(float));
      chunks[global_name(kind, spec, p)].push_back(
          {{"file", file}, {"offset", at}, {"begin", s - offset}, {"count", e - s}, {"crc32", crc}});
    }
    offset += p.numel();
  }
}

// The full padded fp32 tensor of a unit, gathered over its shard group (replicated units: a copy).
at::Tensor gather_full(FlatParamUnit& u, const at::Tensor& local) {
  if (u.shard_numel() == u.padded_numel()) return local.to(at::kCPU).contiguous();
  // On the communicator's device: an offloaded (pinned host) shard goes to the GPU for NCCL.
  Communicator& group = u.shard_group();
  at::Tensor out = at::empty({u.padded_numel()}, local.options().device(group.device()));
  PendingOp op = group.all_gather(out, local.to(group.device()));
  group.wait(op);
  return out.to(at::kCPU).contiguous();
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read " + path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + " is not valid JSON (corrupted checkpoint metadata)");
  return j;
}

void prune(const std::string& dir, int64_t keep_last, int64_t newest) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto step = step_of(e.path());
    if (!step || !e.is_directory()) continue;
    if (fs::exists(e.path() / "metadata.json")) {
      complete.emplace_back(*step, e.path());
    } else if (*step < newest) {
      fs::remove_all(e.path());  // debris of an interrupted save, older than a complete checkpoint
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

}  // namespace

CheckpointStats save_checkpoint(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer, Communicator& world,
                                const TrainState& state) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  const auto& cc = config.checkpoint;
  const std::string path = step_dir(cc.dir, state.step);
  const bool rank0 = world.rank() == 0;
  if (rank0) {
    fs::create_directories(cc.dir);
    if (fs::exists(path)) {
      fs::remove(fs::path(path) / "metadata.json");  // no longer complete from here on
      fsync_dir(path);
      fs::remove_all(path);
    }
    fs::create_directories(path);
    fsync_dir(cc.dir);
  }
  world.barrier();

  const auto units = model.units();
  const bool sharded_format = cc.format == "sharded";
  json own_index;
  if (sharded_format && model.writes_checkpoint()) {
    const std::string file = "rank" + std::to_string(world.rank()) + ".bin";
    AtomicFile f((fs::path(path) / file).string());
    json chunks = json::object();
    for (size_t i = 0; i < units.size(); ++i) {
      const auto [lo, hi] = local_range(*units[i]);
      for (int k = 0; k < 3; ++k) {
        if (lo >= hi) continue;
        const at::Tensor t = kind_tensor(*units[i], optimizer, i, k).to(at::kCPU).contiguous();
        write_unit_range(f, file, units[i]->spec(), kKinds[k], t.data_ptr<float>(), units[i]->shard_offset(), lo, hi,
                         chunks);
        if (i == units.size() / 2 && k == 0 && fault_kill_in_save(state.step, world.rank())) ::raise(SIGKILL);
      }
    }
    f.commit();
    own_index = {{"file", file}, {"bytes", f.bytes_written()}, {"chunks", chunks}};
    write_file_atomic((fs::path(path) / ("rank" + std::to_string(world.rank()) + ".index.json")).string(),
                      own_index.dump());
  } else if (!sharded_format) {
    // Gathered one unit and one tensor kind at a time: beyond its shard a rank holds one unit's tensor.
    std::optional<AtomicFile> f;
    if (rank0) f.emplace((fs::path(path) / "full.bin").string());
    json chunks = json::object();
    for (size_t i = 0; i < units.size(); ++i) {
      for (int k = 0; k < 3; ++k) {
        const at::Tensor full = gather_full(*units[i], kind_tensor(*units[i], optimizer, i, k));
        if (rank0) {
          write_unit_range(*f, "full.bin", units[i]->spec(), kKinds[k], full.data_ptr<float>(), 0, 0, units[i]->numel(),
                           chunks);
          if (i == units.size() / 2 && k == 0 && fault_kill_in_save(state.step, 0)) ::raise(SIGKILL);
        }
      }
    }
    if (rank0) {
      f->commit();
      own_index = {{"file", "full.bin"}, {"bytes", f->bytes_written()}, {"chunks", chunks}};
    }
  }
  world.barrier();  // every data file is committed

  int64_t total_bytes = 0;
  if (rank0) {
    std::vector<json> indexes;
    if (sharded_format) {
      for (int r = 0; r < world.world_size(); ++r) {
        const fs::path p = fs::path(path) / ("rank" + std::to_string(r) + ".index.json");
        if (fs::exists(p)) indexes.push_back(read_json_file(p.string()));
      }
    } else {
      indexes.push_back(own_index);
    }
    json files = json::object();
    json tensors = json::object();
    for (const auto& unit : build_unit_specs(config.model)) {
      for (const auto* kind : kKinds) {
        for (const auto& p : unit.params)
          tensors[global_name(kind, unit, p)] = {{"shape", p.shape}, {"dtype", "float32"}, {"chunks", json::array()}};
      }
    }
    for (const auto& idx : indexes) {
      files[idx["file"].get<std::string>()] = {{"bytes", idx["bytes"]}};
      total_bytes += idx["bytes"].get<int64_t>();
      for (auto it = idx["chunks"].begin(); it != idx["chunks"].end(); ++it) {
        auto& list = tensors.at(it.key())["chunks"];
        for (const auto& c : it.value()) list.push_back(c);
      }
    }
    // Every tensor must be covered exactly once, or the save itself is broken.
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
    const json meta = {
        {"format_version", kFormatVersion},
        {"step", state.step},
        {"optimizer_steps", state.optimizer_steps},
        // Training draws no random numbers after init: the data position is a function of (train.seed, step)
        // and the learning rate of step, so these two integers are the whole RNG and schedule state.
        {"seed", config.train.seed},
        {"saved_with",
         {{"world_size", world.world_size()},
          {"strategy", to_string(config.fsdp.strategy)},
          {"layout", model.layout()},
          {"format", cc.format}}},
        {"model", config.merged.at("model")},
        {"config", config.merged},
        {"files", files},
        {"tensors", tensors},
    };
    write_file_atomic((fs::path(path) / "metadata.json").string(), meta.dump(1));
    for (int r = 0; r < world.world_size(); ++r)
      fs::remove(fs::path(path) / ("rank" + std::to_string(r) + ".index.json"));
    fsync_dir(cc.dir);
    prune(cc.dir, cc.keep_last, state.step);
  }
  world.barrier();  // nobody goes on (or exits on a signal) before the checkpoint is complete
  return {path, total_bytes, std::chrono::duration<double>(Clock::now() - start).count()};
}

TrainState load_checkpoint(const std::string& path, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                           Communicator& world, CheckpointStats* stats) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  std::string error;
  TrainState state;
  int64_t bytes = 0;
  try {
    CheckpointReader reader(path);
    const json& meta = reader.metadata();
    const auto units = model.units();
    for (size_t i = 0; i < units.size(); ++i) {
      const auto& spec = units[i]->spec();
      const auto [lo, hi] = local_range(*units[i]);
      for (int k = 0; k < 3; ++k) {
        at::Tensor buffer = at::zeros({units[i]->shard_numel()}, at::kFloat);  // padding stays zero
        int64_t offset = 0;
        for (const auto& p : spec.params) {
          const std::string name = global_name(kKinds[k], spec, p);
          if (!meta["tensors"].contains(name) || reader.shape(name) != p.shape) {
            throw Error("checkpoint " + path + " does not fit this model: " + name +
                        (meta["tensors"].contains(name) ? " has shape " + meta["tensors"][name]["shape"].dump()
                                                        : " is missing") +
                        " (model config differences, checkpoint vs now: " +
                        config_diff(meta["model"], config.merged["model"]) + ")");
          }
          const int64_t s = std::max(lo, offset);
          const int64_t e = std::min(hi, offset + p.numel());
          if (s < e) {
            reader.read(name, s - offset, e - s, buffer.data_ptr<float>() + (s - units[i]->shard_offset()));
            bytes += (e - s) * static_cast<int64_t>(sizeof(float));
          }
          offset += p.numel();
        }
        at::Tensor& dst = kind_tensor(*units[i], optimizer, i, k);
        dst.copy_(buffer);
      }
    }
    state.step = meta.at("step").get<int64_t>();
    state.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Agree before anyone trains on it: one rank's refusal stops every rank instead of hanging the others.
  const auto verdict = world.sum_over_ranks({error.empty() ? 0.0 : 1.0, static_cast<double>(bytes)});
  if (verdict[0] > 0) {
    if (!error.empty()) throw Error(error);
    throw Error("checkpoint " + path + " was refused by another rank (its error names the file)");
  }
  // Re-gathered parameters must come from the new shards.
  model.reshard_all();
  optimizer.set_steps_taken(state.optimizer_steps);
  if (stats != nullptr) {
    *stats = {path, static_cast<int64_t>(verdict[1]), std::chrono::duration<double>(Clock::now() - start).count()};
  }
  return state;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto step = step_of(e.path());
    if (!step || !fs::exists(e.path() / "metadata.json")) continue;
    if (!best || *step > best->first) best = {{*step, e.path().string()}};
  }
  if (!best) return std::nullopt;
  return best->second;
}

CheckpointReader::CheckpointReader(std::string path) : path_(std::move(path)) {
  const fs::path meta_path = fs::path(path_) / "metadata.json";
  if (!fs::exists(meta_path)) {
    throw Error("checkpoint " + path_ + " is incomplete: " + meta_path.string() +
                " is missing (the save was interrupted; use an older step_<N> or --resume auto)");
  }
  meta_ = read_json_file(meta_path.string());
  if (!meta_.contains("format_version") || meta_["format_version"] != kFormatVersion) {
    throw Error(meta_path.string() + ": unsupported checkpoint format_version (expected " +
                std::to_string(kFormatVersion) + ")");
  }
  for (auto it = meta_["files"].begin(); it != meta_["files"].end(); ++it) {
    const fs::path f = fs::path(path_) / it.key();
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec)
      throw Error("checkpoint " + path_ + " is missing its data file " + f.string() + " (listed in metadata.json)");
    const auto expected = it.value().at("bytes").get<uint64_t>();
    if (size != expected) {
      throw Error("checkpoint data file " + f.string() + " is truncated or altered: " + std::to_string(size) +
                  " bytes, metadata.json says " + std::to_string(expected));
    }
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (auto it = meta_["tensors"].begin(); it != meta_["tensors"].end(); ++it) out.push_back(it.key());
  return out;
}

std::vector<int64_t> CheckpointReader::shape(const std::string& name) const {
  return meta_.at("tensors").at(name).at("shape").get<std::vector<int64_t>>();
}

void CheckpointReader::read(const std::string& name, int64_t begin, int64_t count, float* dst) const {
  const int64_t end = begin + count;
  std::vector<float> scratch;
  for (const auto& c : meta_.at("tensors").at(name).at("chunks")) {
    const int64_t cb = c["begin"].get<int64_t>();
    const int64_t cn = c["count"].get<int64_t>();
    const int64_t s = std::max(begin, cb);
    const int64_t e = std::min(end, cb + cn);
    if (s >= e) continue;
    const std::string file = (fs::path(path_) / c["file"].get<std::string>()).string();
    // The whole chunk is read so its CRC can be checked; straight into dst when it lies inside the request.
    const bool inside = cb >= begin && cb + cn <= end;
    float* into = dst + (cb - begin);
    if (!inside) {
      scratch.resize(static_cast<size_t>(cn));
      into = scratch.data();
    }
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw Error("cannot open checkpoint data file " + file + ": " + std::strerror(errno));
    const size_t nbytes = static_cast<size_t>(cn) * sizeof(float);
    size_t done = 0;
    const auto offset = c["offset"].get<int64_t>();
    while (done < nbytes) {
      const ssize_t r =
          ::pread(fd.get(), reinterpret_cast<char*>(into) + done, nbytes - done, offset + static_cast<int64_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw Error("checkpoint data file " + file + " is truncated (reading " + name + ")");
      done += static_cast<size_t>(r);
    }
    const uint32_t crc = crc32_of(into, nbytes);
    if (crc != c["crc32"].get<uint32_t>()) {
      throw Error("checkpoint data file " + file + " is corrupted: CRC-32 of " + name + " elements [" +
                  std::to_string(cb) + ", " + std::to_string(cb + cn) + ") does not match metadata.json");
    }
    if (!inside) std::memcpy(dst + (s - begin), scratch.data() + (s - cb), static_cast<size_t>(e - s) * sizeof(float));
  }
}

}  // namespace meshrun::trainer

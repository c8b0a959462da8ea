#include "trainer/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "common/error.hpp"
#include "common/pread_full.hpp"
#include "common/unique_fd.hpp"
#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/checkpoint/checkpoint_files.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

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

}  // namespace

at::Tensor& kind_tensor(FlatParamUnit& unit, AdamW& optimizer, size_t index, int kind) {
  if (kind == 0) return unit.shard();
  return kind == 1 ? optimizer.exp_avg(index) : optimizer.exp_avg_sq(index);
}

namespace {

// What `step` threw on this rank ("" when it did not).
std::string error_of(const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

void agreed(Communicator& world, const std::string& path, const std::function<void()>& step) {
  throw_if_failed(world.first_failure(error_of(step)), path);
}

std::pair<int64_t, int64_t> local_range(const FlatParamUnit& unit) {
  const int64_t lo = std::min(unit.shard_offset(), unit.numel());
  return {lo, std::min(unit.shard_offset() + unit.shard_numel(), unit.numel())};
}

int64_t fill_shard(const FlatParamUnit& unit, at::Tensor& dst, const ReadPiece& read) {
  const auto [lo, hi] = local_range(unit);
  at::Tensor buffer = at::zeros({unit.shard_numel()}, at::kFloat);  // padding stays zero
  int64_t elements = 0;
  for_each_param_slice(unit.spec(), lo, hi, [&](const ParamSlice& slice) {
    read(slice.param, slice.begin, slice.count, buffer.data_ptr<float>() + (slice.at - unit.shard_offset()));
    elements += slice.count;
  });
  dst.copy_(buffer);
  return elements;
}

void run_agreed(Communicator& world, const std::function<void()>& step) {
  const std::string error = error_of(step);
  const auto failure = world.first_failure(error);
  if (!error.empty()) throw Error(error);
  if (failure) throw Error("rank " + std::to_string(failure->rank) + " refused: " + failure->message);
}

void throw_if_failed(const std::optional<RankFailure>& failure, const std::string& path) {
  if (!failure) return;
  throw CheckpointWriteError(
      failure->rank, "checkpoint " + path + " could not be saved: rank " + std::to_string(failure->rank) + " failed: " +
                         failure->message + " (every rank stops; the previous complete checkpoint stays the newest)");
}

CheckpointStats save_checkpoint(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer, Communicator& world,
                                const TrainState& state) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  const auto& cc = config.checkpoint;
  const std::string path = step_dir(cc.dir, state.step);
  const bool rank0 = world.rank() == 0;
  agreed(world, path, [&] {
    if (rank0) prepare_step_dir(cc.dir, path);
  });

  const auto units = model.units();
  const SaveSite site{state.step, world.rank(), units.size()};
  const bool sharded_format = cc.format == "sharded";
  json own_index;
  agreed(world, path, [&] {
    if (sharded_format && model.writes_checkpoint()) {
      ShardFileWriter f(path, "rank" + std::to_string(world.rank()) + ".bin", site);
      for (size_t i = 0; i < units.size(); ++i) {
        const auto [lo, hi] = local_range(*units[i]);
        if (lo >= hi) continue;
        for (int k = 0; k < kCheckpointKindCount; ++k) {
          const at::Tensor t = kind_tensor(*units[i], optimizer, i, k).to(at::kCPU).contiguous();
          f.append(units[i]->spec(), i, k, t.data_ptr<float>(), units[i]->shard_offset(), lo, hi);
        }
      }
      write_rank_index(path, world.rank(), f.commit());
    } else if (!sharded_format) {
      // Gathered one unit and one tensor kind at a time: beyond its shard a rank holds one unit's tensor.
      std::optional<ShardFileWriter> f;
      if (rank0) f.emplace(path, "full.bin", site);
      for (size_t i = 0; i < units.size(); ++i) {
        for (int k = 0; k < kCheckpointKindCount; ++k) {
          const at::Tensor full = gather_full(*units[i], kind_tensor(*units[i], optimizer, i, k));
          if (rank0) f->append(units[i]->spec(), i, k, full.data_ptr<float>(), 0, 0, units[i]->numel());
        }
      }
      if (rank0) own_index = f->commit();
    }
  });

  // Every data file is committed: rank 0 writes metadata.json, and nobody goes on (or exits on a signal)
  // before the checkpoint is complete.
  int64_t total_bytes = 0;
  agreed(world, path, [&] {
    if (!rank0) return;
    const SaveRecord record{state.step, state.optimizer_steps, world.world_size(), model.layout()};
    total_bytes = finish_checkpoint(config, path, record, sharded_format ? nullptr : &own_index);
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  CheckpointStats stats{path, total_bytes, seconds};
  stats.blocked_seconds = seconds;
  return stats;
}

namespace {

// Every tensor of the model must be in the checkpoint with its shape, whatever this rank will read.
void check_fits(const CheckpointReader& reader, const UnitSpec& spec, const TrainerConfig& config) {
  const json& meta = reader.metadata();
  for (const auto* kind : kCheckpointKinds) {
    for (const auto& p : spec.params) {
      const std::string name = global_name(kind, spec, p);
      const bool present = meta["tensors"].contains(name);
      if (present && reader.shape(name) == p.shape) continue;
      throw Error(
          "checkpoint " + reader.path() + " does not fit this model: " + name +
          (present ? " has shape " + meta["tensors"][name]["shape"].dump() : " is missing") +
          " (model config differences, checkpoint vs now: " + config_diff(meta["model"], config.merged["model"]) + ")");
    }
  }
}

}  // namespace

TrainState load_from(const OpenReader& open, const std::string& label, const TrainerConfig& config, ShardedModel& model,
                     AdamW& optimizer, Communicator& world, CheckpointStats* stats) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  const auto units = model.units();
  std::optional<CheckpointReader> reader;
  run_agreed(world, [&] {
    reader.emplace(open());
    for (auto* unit : units) check_fits(*reader, unit->spec(), config);
  });
  TrainState state;
  int64_t elements = 0;
  run_agreed(world, [&] {
    for (size_t i = 0; i < units.size(); ++i) {
      const UnitSpec& spec = units[i]->spec();
      for (int k = 0; k < kCheckpointKindCount; ++k) {
        const auto read = [&](const ParamSpec& p, int64_t first, int64_t count, float* out) {
          reader->read(global_name(kCheckpointKinds[k], spec, p), first, count, out);
        };
        elements += fill_shard(*units[i], kind_tensor(*units[i], optimizer, i, k), read);
      }
    }
    state.step = reader->metadata().at("step").get<int64_t>();
    state.optimizer_steps = reader->metadata().at("optimizer_steps").get<int64_t>();
  });
  // Re-gathered parameters must come from the new shards.
  model.reshard_all();
  optimizer.set_steps_taken(state.optimizer_steps);
  const double bytes = world.sum_over_ranks({static_cast<double>(elements) * sizeof(float)})[0];  // every rank
  if (stats != nullptr)
    *stats = {label, static_cast<int64_t>(bytes), std::chrono::duration<double>(Clock::now() - start).count()};
  return state;
}

TrainState load_checkpoint(const std::string& path, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                           Communicator& world, CheckpointStats* stats) {
  return load_from([&] { return CheckpointReader(path); }, path, config, model, optimizer, world, stats);
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::optional<std::pair<int64_t, std::string>> best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto step = step_of_folder(e.path().filename().string());
    if (!step || !fs::exists(e.path() / "metadata.json")) continue;
    if (!best || *step > best->first) best = {{*step, e.path().string()}};
  }
  if (!best) return std::nullopt;
  return best->second;
}

namespace {

void pread_chunk(const std::string& file, uint64_t offset, size_t bytes, void* dst) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("cannot open checkpoint data file " + file + ": " + std::strerror(errno));
  if (pread_full(fd.get(), dst, bytes, offset) != static_cast<ssize_t>(bytes))
    throw Error("checkpoint data file " + file + " is truncated");
}

}  // namespace

CheckpointReader::CheckpointReader(std::string label, nlohmann::json meta, ChunkBytes bytes, bool chunks_verified)
    : path_(std::move(label)), meta_(std::move(meta)), bytes_(std::move(bytes)), chunks_verified_(chunks_verified) {}

CheckpointReader::CheckpointReader(std::string path) : path_(std::move(path)), bytes_(pread_chunk) {
  const fs::path meta_path = fs::path(path_) / "metadata.json";
  if (!fs::exists(meta_path)) {
    throw Error("checkpoint " + path_ + " is incomplete: " + meta_path.string() +
                " is missing (the save was interrupted; use an older step_<N> or --resume auto)");
  }
  meta_ = read_json_file(meta_path.string());
  if (!meta_.contains("format_version") || meta_["format_version"] != kCheckpointFormatVersion) {
    throw Error(meta_path.string() + ": unsupported checkpoint format_version (expected " +
                std::to_string(kCheckpointFormatVersion) + ")");
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
    const size_t nbytes = static_cast<size_t>(cn) * sizeof(float);
    bytes_(file, c["offset"].get<uint64_t>(), nbytes, into);
    if (!chunks_verified_ && crc32_of(into, nbytes) != c["crc32"].get<uint32_t>()) {
      throw Error("checkpoint data file " + file + " is corrupted: CRC-32 of " + name + " elements [" +
                  std::to_string(cb) + ", " + std::to_string(cb + cn) + ") does not match metadata.json");
    }
    if (!inside) std::memcpy(dst + (s - begin), scratch.data() + (s - cb), static_cast<size_t>(e - s) * sizeof(float));
  }
}

}  // namespace meshrun::trainer

// The files of a checkpoint, shared by the synchronous save (checkpoint.cpp) and the background writer
// (async_writer.cpp): the step folder, one rank's shard file and its index, and metadata.json, which rank 0
// writes last from the ranks' indexes, then prunes. Nothing here communicates (the callers agree between
// these steps with Communicator::first_failure) and nothing here touches a tensor: shard data arrives as
// host pointers, so the same bytes come out whether they point at the live shards or at a snapshot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/model/model.hpp"

namespace meshrun::trainer {

inline constexpr int kCheckpointFormatVersion = 1;
/// The tensor kinds a checkpoint holds per parameter, and the prefix of their global names.
inline constexpr const char* kCheckpointKinds[] = {"model", "optim.exp_avg", "optim.exp_avg_sq"};
inline constexpr int kCheckpointKindCount = 3;

/// <dir>/step_<N> with N zero-padded to 8 digits, so names sort by step.
std::string step_dir(const std::string& dir, int64_t step);
/// N of a folder named step_<N>; nullopt for any other name.
std::optional<int64_t> step_of_folder(const std::string& name);
/// "model.block3.wq", "optim.exp_avg.root.tok_embeddings", ...
std::string global_name(const char* kind, const UnitSpec& unit, const ParamSpec& param);

/// Rank 0, before any rank writes: `path` exists and is empty. An older folder of the same step loses its
/// metadata.json first, durably, so a crash from here on never leaves it looking complete.
void prepare_step_dir(const std::string& dir, const std::string& path);

/// Who writes a data file at which step: selects the test hooks (MESHRUN_TRAINER_FAULT_*_IN_SAVE=STEP:RANK).
struct SaveSite {
  int64_t step = 0;
  int rank = 0;
  size_t units = 0;  // units in the model: the kill hook fires after unit units/2
};

/// The chunk index of one data file (rank<R>.bin, full.bin, or a copy in memory in rank<R>.bin's layout):
/// where each parameter's slice lies in the file, and its CRC; metadata.json is merged from these.
class ChunkIndex {
 public:
  explicit ChunkIndex(std::string file) : file_(std::move(file)) {}
  /// The slice `slice` of tensor kind `kind` of `unit` lies at byte `offset` of the file.
  void add(int kind, const UnitSpec& unit, const ParamSlice& slice, uint64_t offset, uint32_t crc);
  /// {file, bytes, chunks}; the index is spent.
  nlohmann::json to_json(uint64_t bytes) &&;

 private:
  std::string file_;
  nlohmann::json chunks_ = nlohmann::json::object();
};

/// One data file of a checkpoint (rank<R>.bin or full.bin), written under a temporary name and committed
/// atomically, with the index of the chunks it holds.
class ShardFileWriter {
 public:
  /// Throws meshrun::Error naming the path when the file cannot be created.
  ShardFileWriter(const std::string& path, const std::string& file, SaveSite site);

  /// Appends unit-flat elements [lo, hi) of one tensor kind of `unit` (data[0] is unit element `base`) and
  /// records one chunk per parameter it touches. Throws meshrun::Error naming the file when a write fails.
  void append(const UnitSpec& unit, size_t unit_index, int kind, const float* data, int64_t base, int64_t lo,
              int64_t hi);
  /// fsync, rename into place; returns the index {file, bytes, chunks} metadata.json is built from.
  nlohmann::json commit();

 private:
  SaveSite site_;
  AtomicFile file_;
  ChunkIndex index_;
};

/// <path>/rank<R>.index.json: a rank's index, for rank 0 to collect (sharded format).
void write_rank_index(const std::string& path, int rank, const nlohmann::json& index);

/// What metadata.json records about the save besides its tensors.
struct SaveRecord {
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  int world_size = 1;
  std::string layout;
};

/// Rank 0, once every rank's data file is committed: metadata.json built from the ranks' index files
/// (or from `own_index` alone, for the full format), written atomically as the last file; the index
/// files go, the checkpoint dir is fsynced, and older checkpoints beyond checkpoint.keep_last are removed.
/// Returns the bytes of the checkpoint's data files.
int64_t finish_checkpoint(const TrainerConfig& config, const std::string& path, const SaveRecord& record,
                          const nlohmann::json* own_index);

/// Sorts each tensor's chunks (a metadata "tensors" table) by position; throws meshrun::Error unless every
/// tensor is covered exactly once (the files, or the copies in memory, are not a whole checkpoint).
void check_chunks_tile(nlohmann::json& tensors);

/// Every tensor of every kind a checkpoint of `model` holds, {shape, dtype, chunks: []}: the table the
/// ranks' chunk indexes are merged into.
nlohmann::json empty_tensor_table(const ModelConfig& model);

/// A checkpoint JSON file (metadata.json, a rank index); throws Error naming it when unreadable or not JSON.
nlohmann::json read_json_file(const std::string& path);

}  // namespace meshrun::trainer

// Checkpoints: <checkpoint.dir>/step_<N>/ holds the data files and one metadata.json, written last.
//
//   sharded: every rank that owns a distinct shard writes rank<R>.bin (its fp32 parameter chunk and AdamW
//            moments, padding excluded) in parallel; replicas (NO_SHARD, HYBRID_*) write once.
//   full:    rank 0 writes full.bin, gathered one unit (and one tensor kind) at a time.
//
// metadata.json maps every tensor's global name ("model.block3.wq", "optim.exp_avg.block3.wq", ...),
// shape and dtype to chunks: {file, byte offset, element range of the flattened tensor, CRC-32}. Chunks
// are 1-D ranges of the row-major tensor (our shards are flat), so any layout can read any other: a
// loading rank computes its own range under its own world size and strategy and reads just the chunks
// that overlap it (resharding on load, no communication). A step folder without metadata.json is an
// interrupted save and is never loaded.
//
// Every step of a save ends with the ranks agreeing on its outcome (Communicator::first_failure): a rank
// whose write fails (disk full, permission denied) makes every rank throw CheckpointWriteError naming it.
// checkpoint.async saves are written by a background thread (async_writer.hpp) through the same files.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/adamw.hpp"
#include "trainer/fsdp/sharded_model.hpp"

namespace meshrun::trainer {

/// Where training stands; everything else (data position, learning rate) is a function of it and the config.
struct TrainState {
  int64_t step = 0;             // optimizer steps completed
  int64_t optimizer_steps = 0;  // AdamW's bias-correction count
};

struct CheckpointStats {
  std::string path;
  int64_t bytes = 0;  // data bytes written or read, all ranks together
  double seconds = 0;
  bool async = false;                // written by the background writer (checkpoint.async)
  double blocked_seconds = 0;        // of `seconds`, how long training waited (a synchronous save: all of it)
  double snapshot_wait_seconds = 0;  // of `blocked_seconds`, the optimizer step's wait for the snapshot (async)
  int64_t written_during_step = 0;   // async: the training step running when this rank's file was written
};

/// A save failed on some rank; every rank throws it, with the failing rank and its message.
class CheckpointWriteError : public Error {
 public:
  CheckpointWriteError(int rank, const std::string& message) : Error(message), rank_(rank) {}
  /// The rank whose write failed.
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// Throws CheckpointWriteError for the checkpoint at `path` when `failure` is set.
void throw_if_failed(const std::optional<RankFailure>& failure, const std::string& path);

/// Runs one step of a save on this rank and agrees on the outcome with every rank: all of them throw
/// CheckpointWriteError naming the first failing rank, instead of the others hanging in the next
/// collective until system.timeout_s.
void agreed(Communicator& world, const std::string& path, const std::function<void()>& step);

/// The tensor a checkpoint kind names for unit `index`: 0 its shard, 1 exp_avg, 2 exp_avg_sq.
at::Tensor& kind_tensor(FlatParamUnit& unit, AdamW& optimizer, size_t index, int kind);

/// The real (unpadded) part of this rank's chunk of a unit, as unit-flat element indices [lo, hi).
std::pair<int64_t, int64_t> local_range(const FlatParamUnit& unit);

/// Reads elements [first, first + count) of parameter `param`'s flattened tensor into `out`.
using ReadPiece = std::function<void(const ParamSpec& param, int64_t first, int64_t count, float* out)>;

/// Fills `dst` (this rank's chunk of `unit`: its shard or an AdamW moment, on any device) piece by piece:
/// `read` gets every parameter's part inside the chunk; padding stays zero. Returns the elements read.
int64_t fill_shard(const FlatParamUnit& unit, at::Tensor& dst, const ReadPiece& read);

/// Runs `step` on every rank and agrees on the outcome before anyone goes on (loads: nobody trains on a
/// half-loaded model): when any rank's step throws, every rank throws meshrun::Error, a failing rank its own
/// message, the others the first failing rank's.
void run_agreed(Communicator& world, const std::function<void()>& step);

/// Saves the model and optimizer as <config.checkpoint.dir>/step_<N>. Collective over `world`; returns once
/// the checkpoint is complete (metadata.json committed). Rank 0 then drops all but the newest keep_last.
/// Throws CheckpointWriteError on every rank when any rank fails.
CheckpointStats save_checkpoint(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer, Communicator& world,
                                const TrainState& state);

/// Loads a checkpoint saved with any world size, strategy or format into this layout. Collective over
/// `world`: if any rank refuses the checkpoint (missing, truncated or corrupted file, other model shape),
/// every rank throws, and the refusing rank's message names the file.
TrainState load_checkpoint(const std::string& path, const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                           Communicator& world, CheckpointStats* stats = nullptr);

class CheckpointReader;

/// Opens the checkpoint to load (on every rank, inside the load's agreement, so a refusal stops all ranks).
using OpenReader = std::function<CheckpointReader()>;

/// The load core shared by storage and memory: opens the reader and checks that the checkpoint fits this
/// model (agreed), then fills every rank's shards and AdamW moments (agreed), then reshards. Nothing is
/// changed before every rank has opened and checked its source, so a refusal leaves the model as it was.
TrainState load_from(const OpenReader& open, const std::string& label, const TrainerConfig& config, ShardedModel& model,
                     AdamW& optimizer, Communicator& world, CheckpointStats* stats = nullptr);

/// The newest step_<N> folder under `dir` that has a metadata.json, if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);

/// Reads tensors of a checkpoint by global name, checking sizes and CRCs (export, tests).
class CheckpointReader {
 public:
  /// Reads `bytes` of data file `file` (the path under the checkpoint's label) from `offset` into `dst`;
  /// throws meshrun::Error naming the file when it cannot.
  using ChunkBytes = std::function<void(const std::string& file, uint64_t offset, size_t bytes, void* dst)>;

  /// Throws meshrun::Error naming the file when metadata.json or a data file is missing or truncated.
  explicit CheckpointReader(std::string path);
  /// A checkpoint held elsewhere (a copy in memory): its metadata and where its bytes come from. `label`
  /// names it in messages. `chunks_verified`: every chunk's CRC was checked already (read() skips it).
  CheckpointReader(std::string label, nlohmann::json meta, ChunkBytes bytes, bool chunks_verified = false);
  const nlohmann::json& metadata() const { return meta_; }
  /// The step_<N> folder.
  const std::string& path() const { return path_; }
  /// Global names in metadata order.
  std::vector<std::string> names() const;
  std::vector<int64_t> shape(const std::string& name) const;
  /// Elements [begin, begin + count) of the flattened tensor into dst; throws naming the file on a CRC mismatch.
  void read(const std::string& name, int64_t begin, int64_t count, float* dst) const;

 private:
  std::string path_;
  nlohmann::json meta_;
  ChunkBytes bytes_;
  bool chunks_verified_ = false;
};

}  // namespace meshrun::trainer

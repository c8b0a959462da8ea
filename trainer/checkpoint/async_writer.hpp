// Asynchronous checkpoints (checkpoint.async). A save blocks training only while the ranks agree that the
// step folder exists and this rank hands its save to a writer thread. The writer copies the rank's shards
// (fp32 parameters and both AdamW moments) into host buffers allocated once and reused by every save, then
// writes rank<R>.bin from them through the same ShardFileWriter as a synchronous save (so the same bytes),
// fsyncs and renames it. Training meanwhile runs the next step's forward and backward, which only read the
// shards; its optimizer step, the first thing that changes them, waits in before_update() until the
// snapshot is taken (by then long done: a memcpy against a forward and a backward). On a GPU the snapshot
// is a device-to-host copy into pinned buffers on a side stream, ordered after the compute stream.
//
// When is a checkpoint complete, and who says so? metadata.json must be written last, by rank 0, once every
// rank's shard is durable. The ranks agree on that without blocking training: the loss all-reduce that
// every step already does carries two more numbers per rank, status() = {failed, done}, and advance()
// reads their sums. Every rank sees the same sums after the same step, so all of them move through a save's
// phases in lockstep:
//
//   writing    every rank's writer works on its shard file     -- all done -->
//   finishing  rank 0's writer writes metadata.json and prunes -- done     --> idle: complete
//
// and a failure anywhere (disk full, permission denied), seen by every rank at the same step, makes all of
// them throw CheckpointWriteError naming the failing rank (Communicator::first_failure) within one step,
// instead of timing out. Why not a barrier of the writer threads through the store: it would cost store
// round trips and a waiting writer, and the failure would still have to reach the training threads, which
// meet only in their collectives; the step's all-reduce is already such a meeting and costs nothing extra.
// Collectives never run on the writer thread (Gloo and NCCL need every rank to issue a group's collectives
// in the same order, which two threads per rank cannot promise). The price is latency: a save completes one
// step after the slowest rank's shard is durable, and one more step for metadata.json.
//
// At most one save is in flight: start() first finishes the previous one (finish(): blocking, collective).
// A crash at any point before metadata.json leaves the step folder incomplete, so the previous checkpoint
// stays the newest one that --resume auto and keep_last count.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include "trainer/checkpoint/background_writer.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/config/trainer_config.hpp"

namespace meshrun::trainer {

class AsyncCheckpointer {
 public:
  /// Allocates the host buffers (pinned on CUDA) and starts the writer thread; construct it after the
  /// PreemptionWatch so that thread keeps the preemption signals blocked.
  /// `training_step`: the step training runs now, read when a file is written (the overlap's witness).
  AsyncCheckpointer(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer, Communicator& world,
                    const std::atomic<int64_t>& training_step);
  /// Stops the writer; a save still in flight stays incomplete (never loaded).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  /// What start() had to do before the new save could begin.
  struct Started {
    double waited_seconds = 0;                // finishing the save in flight (0 when there was none)
    std::optional<CheckpointStats> previous;  // that save, now complete
  };
  /// Starts saving the state after `state.step` (collective). Throws CheckpointWriteError on every rank
  /// when a rank fails to finish the previous save or to prepare this one.
  Started start(const TrainState& state);
  /// Call before anything changes the shards or the AdamW moments: waits until the snapshot of the save in
  /// flight is taken.
  void before_update();
  /// This rank's part of the step's all-reduce: {failed, done}, each 0 or 1.
  std::array<double, 2> status() const;
  /// The sums over ranks of status(), after the step's all-reduce. Advances the save in flight and returns
  /// its stats when it completed at this step; throws CheckpointWriteError, on every rank alike, when a
  /// rank failed.
  std::optional<CheckpointStats> advance(double failed, double done);
  /// Blocks until the save in flight is complete (collective): its stats, if there was one.
  std::optional<CheckpointStats> finish();
  /// Bytes of the host buffers the snapshots go to.
  int64_t snapshot_bytes() const;

 private:
  enum class Phase { kIdle, kWriting, kFinishing };
  /// One range of a unit tensor in the shard file and in the host buffer.
  struct Piece {
    const UnitSpec* spec = nullptr;
    size_t unit = 0;
    int kind = 0;
    int64_t lo = 0;  // unit-flat elements [lo, hi)
    int64_t hi = 0;
    int64_t at = 0;  // first element in the host buffer
    at::Tensor source;
    int64_t source_offset = 0;           // element lo in `source`
    const float* host_source = nullptr;  // element lo, when `source` is in host memory (the writer copies it)
  };
  /// A save's shard file: what the writer thread needs to write it.
  struct ShardJob {
    std::string path;
    TrainState state;
    std::optional<c10::Event> copied;  // GPU sources: the device-to-host copies are done
  };

  /// The writer thread's job for this rank's shard file: takes the snapshot, releases the gate, writes.
  void write_shard(const ShardJob& job);
  /// Snapshot of the host-resident sources into the buffer (writer thread).
  void copy_host_pieces();
  /// GPU sources: device-to-host copies into the pinned buffer on a side stream; their completion event.
  std::optional<c10::Event> copy_device_pieces();
  [[noreturn]] void fail();

  const TrainerConfig& config_;
  ShardedModel& model_;
  Communicator& world_;
  const std::atomic<int64_t>& training_step_;
  size_t unit_count_ = 0;
  std::vector<Piece> pieces_;
  at::Tensor buffer_;       // every piece, in file order
  bool on_device_ = false;  // some piece lives on the GPU: snapshots start with device-to-host copies
  float* buffer_data_ = nullptr;
  std::optional<c10::Stream> side_stream_;

  // Main thread only: the save in flight.
  Phase phase_ = Phase::kIdle;
  std::string path_;
  TrainState state_;
  double started_at_ = 0;  // steady clock seconds
  double blocked_ = 0;
  double snapshot_wait_ = 0;
  bool gate_pending_ = false;

  // Written by the writer's jobs, read once BackgroundWriter::state() says idle.
  int64_t finished_bytes_ = 0;
  int64_t written_during_step_ = 0;

  BackgroundWriter writer_;  // last: stopped first, while everything its job reads still exists
};

}  // namespace meshrun::trainer

#include "trainer/checkpoint/async_writer.hpp"

#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "common/error.hpp"
#include "trainer/checkpoint/checkpoint_files.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/adamw.hpp"
#include "trainer/fsdp/sharded_model.hpp"

namespace meshrun::trainer {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

AsyncCheckpointer::AsyncCheckpointer(const TrainerConfig& config, ShardedModel& model, AdamW& optimizer,
                                     Communicator& world, const std::atomic<int64_t>& training_step)
    : config_(config), model_(model), world_(world), training_step_(training_step) {
  // The pieces in the order a synchronous save writes them: unit by unit, each unit's parameters, then
  // exp_avg, then exp_avg_sq. Replicas that do not write (NO_SHARD, HYBRID_*) have none.
  int64_t total = 0;
  const auto units = model.units();
  unit_count_ = units.size();
  for (size_t i = 0; i < units.size() && model.writes_checkpoint(); ++i) {
    const auto [lo, hi] = local_range(*units[i]);
    if (lo >= hi) continue;
    for (int k = 0; k < kCheckpointKindCount; ++k) {
      at::Tensor& source = kind_tensor(*units[i], optimizer, i, k);
      if (!source.is_contiguous() || source.scalar_type() != at::kFloat)
        throw Error("internal: checkpoint.async needs contiguous fp32 shards and moments");
      Piece piece{&units[i]->spec(), i, k, lo, hi, total, source, lo - units[i]->shard_offset(), nullptr};
      // Host memory (the CPU, or CUDA with fsdp.cpu_offload) is copied by the writer from this pointer: the
      // shards and moments are updated in place and never reallocated.
      if (!source.is_cuda()) piece.host_source = source.const_data_ptr<float>() + piece.source_offset;
      pieces_.push_back(std::move(piece));
      on_device_ = on_device_ || source.is_cuda();
      total += hi - lo;
    }
  }
  // Pinned when device-to-host copies land here (they can then be asynchronous). Touched once now, so the
  // first snapshot does not pay the page faults.
  buffer_ = at::empty({total}, at::TensorOptions().dtype(at::kFloat).pinned_memory(on_device_));
  buffer_.zero_();
  buffer_data_ = buffer_.data_ptr<float>();
}

AsyncCheckpointer::~AsyncCheckpointer() = default;

int64_t AsyncCheckpointer::snapshot_bytes() const { return static_cast<int64_t>(buffer_.nbytes()); }

AsyncCheckpointer::Started AsyncCheckpointer::start(const TrainState& state) {
  const double begin = now_seconds();
  Started started;
  if (phase_ != Phase::kIdle) {
    started.previous = finish();
    started.waited_seconds = now_seconds() - begin;
  }
  path_ = step_dir(config_.checkpoint.dir, state.step);
  state_ = state;
  agreed(world_, path_, [&] {
    if (world_.rank() == 0) prepare_step_dir(config_.checkpoint.dir, path_);
  });  // the folder exists for every rank from here on

  // Shared: a c10::Event cannot be copied, and a job must be.
  auto job = std::make_shared<ShardJob>(ShardJob{path_, state, copy_device_pieces()});
  writer_.submit([this, job] { write_shard(*job); }, /*holds_gate=*/true);
  phase_ = Phase::kWriting;
  gate_pending_ = true;
  started_at_ = now_seconds();
  blocked_ = started_at_ - begin;
  snapshot_wait_ = 0;
  return started;
}

std::optional<c10::Event> AsyncCheckpointer::copy_device_pieces() {
  if (!on_device_) return std::nullopt;
  const at::Device device = world_.device();
  const c10::impl::VirtualGuardImpl impl(device.type());
  if (!side_stream_) side_stream_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  // The copies run after everything already queued on the compute stream (this step's optimizer update).
  c10::Event ready(device.type());
  ready.record(impl.getStream(device));
  ready.block(*side_stream_);
  {
    const c10::StreamGuard on_side(*side_stream_);
    for (const auto& p : pieces_) {
      if (!p.source.is_cuda()) continue;
      buffer_.narrow(0, p.at, p.hi - p.lo)
          .copy_(p.source.narrow(0, p.source_offset, p.hi - p.lo), /*non_blocking=*/true);
    }
  }
  c10::Event copied(device.type());
  copied.record(*side_stream_);
  return copied;
}

void AsyncCheckpointer::before_update() {
  if (!gate_pending_) return;
  snapshot_wait_ = writer_.wait_for_gate();
  gate_pending_ = false;
  blocked_ += snapshot_wait_;
}

std::array<double, 2> AsyncCheckpointer::status() const {
  const auto writer = writer_.state();
  const bool failed = !writer.first_error.empty();
  const bool done = phase_ != Phase::kIdle && writer.idle && !failed;
  return {failed ? 1.0 : 0.0, done ? 1.0 : 0.0};
}

std::optional<CheckpointStats> AsyncCheckpointer::advance(double failed, double done) {
  if (failed > 0) fail();
  if (phase_ == Phase::kIdle || done < static_cast<double>(world_.world_size())) return std::nullopt;
  if (phase_ == Phase::kWriting) {
    // Every rank's shard file is durable: metadata.json may go in now.
    phase_ = Phase::kFinishing;
    if (world_.rank() == 0) {
      const SaveRecord record{state_.step, state_.optimizer_steps, world_.world_size(), model_.layout()};
      writer_.submit(
          [this, path = path_, record] { finished_bytes_ = finish_checkpoint(config_, path, record, nullptr); },
          /*holds_gate=*/false);
    }
    return std::nullopt;
  }
  phase_ = Phase::kIdle;
  CheckpointStats stats{path_, finished_bytes_, now_seconds() - started_at_};
  stats.written_during_step = written_during_step_;
  stats.async = true;
  stats.blocked_seconds = blocked_;
  stats.snapshot_wait_seconds = snapshot_wait_;
  return stats;
}

std::optional<CheckpointStats> AsyncCheckpointer::finish() {
  std::optional<CheckpointStats> completed;
  // One collective per phase: after wait_idle() every rank is done or failed, so each round moves on.
  while (phase_ != Phase::kIdle) {
    writer_.wait_idle();
    const auto own = status();
    const auto sums = world_.sum_over_ranks({own[0], own[1]});
    if (auto stats = advance(sums[0], sums[1])) completed = std::move(stats);
  }
  return completed;
}

void AsyncCheckpointer::fail() {
  const std::string own = writer_.state().first_error;
  phase_ = Phase::kIdle;
  const auto failure = world_.first_failure(own);
  throw_if_failed(failure, path_);
  throw Error("internal: a rank reported a failed checkpoint write but no rank named it");
}

void AsyncCheckpointer::copy_host_pieces() {
  // Raw pointers only: this thread never calls into ATen.
  for (const auto& p : pieces_) {
    if (p.host_source != nullptr)
      std::memcpy(buffer_data_ + p.at, p.host_source, static_cast<size_t>(p.hi - p.lo) * sizeof(float));
  }
}

void AsyncCheckpointer::write_shard(const ShardJob& job) {
  if (job.copied) job.copied->synchronize();
  copy_host_pieces();
  writer_.release_gate();
  if (!model_.writes_checkpoint()) return;
  const int rank = world_.rank();
  ShardFileWriter file(job.path, "rank" + std::to_string(rank) + ".bin", {job.state.step, rank, unit_count_});
  for (const auto& p : pieces_) {
    writer_.throw_if_stopping();
    file.append(*p.spec, p.unit, p.kind, buffer_data_ + p.at, p.lo, p.lo, p.hi);
  }
  write_rank_index(job.path, rank, file.commit());
  written_during_step_ = training_step_.load();
}

}  // namespace meshrun::trainer

#include "trainer/checkpoint/async_writer.hpp"

#include <chrono>
#include <cstring>
#include <exception>
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

// What the writer throws to drop a job when the checkpointer is destroyed mid-save.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "checkpoint save cancelled"; }
};

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
  writer_ = std::thread([this] { writer_loop(); });
}

AsyncCheckpointer::~AsyncCheckpointer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

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

  Job job;
  job.kind = JobKind::kWrite;
  job.path = path_;
  job.state = state;
  job.copied = copy_device_pieces();
  submit(std::move(job));
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
  const double begin = now_seconds();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return snapshot_taken_; });
  lock.unlock();
  gate_pending_ = false;
  snapshot_wait_ = now_seconds() - begin;
  blocked_ += snapshot_wait_;
}

std::array<double, 2> AsyncCheckpointer::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool failed = !error_.empty();
  const bool done = phase_ != Phase::kIdle && !busy_ && !failed;
  return {failed ? 1.0 : 0.0, done ? 1.0 : 0.0};
}

std::optional<CheckpointStats> AsyncCheckpointer::advance(double failed, double done) {
  if (failed > 0) fail();
  if (phase_ == Phase::kIdle || done < static_cast<double>(world_.world_size())) return std::nullopt;
  if (phase_ == Phase::kWriting) {
    // Every rank's shard file is durable: metadata.json may go in now.
    phase_ = Phase::kFinishing;
    if (world_.rank() == 0) {
      Job job;
      job.kind = JobKind::kFinish;
      job.path = path_;
      job.state = state_;
      submit(std::move(job));
    }
    return std::nullopt;
  }
  phase_ = Phase::kIdle;
  CheckpointStats stats{path_, 0, now_seconds() - started_at_};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats.bytes = finished_bytes_;
    stats.written_during_step = written_during_step_;
  }
  stats.async = true;
  stats.blocked_seconds = blocked_;
  stats.snapshot_wait_seconds = snapshot_wait_;
  return stats;
}

std::optional<CheckpointStats> AsyncCheckpointer::finish() {
  std::optional<CheckpointStats> completed;
  // One collective per phase: after wait_idle() every rank is done or failed, so each round moves on.
  while (phase_ != Phase::kIdle) {
    wait_idle();
    const auto own = status();
    const auto sums = world_.sum_over_ranks({own[0], own[1]});
    if (auto stats = advance(sums[0], sums[1])) completed = std::move(stats);
  }
  return completed;
}

void AsyncCheckpointer::fail() {
  std::string own;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    own = error_;
  }
  phase_ = Phase::kIdle;
  const auto failure = world_.first_failure(own);
  throw_if_failed(failure, path_);
  throw Error("internal: a rank reported a failed checkpoint write but no rank named it");
}

void AsyncCheckpointer::submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    busy_ = true;
    snapshot_taken_ = job_->kind != JobKind::kWrite;
  }
  changed_.notify_all();
}

void AsyncCheckpointer::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !busy_; });
}

void AsyncCheckpointer::writer_loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return stop_ || job_.has_value(); });
    if (stop_) return;
    Job job = std::move(*job_);
    job_.reset();
    lock.unlock();
    std::string error;
    try {
      run(job);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    busy_ = false;
    snapshot_taken_ = true;  // also when the job failed: the gate must not wait forever
    if (!error.empty() && error_.empty()) error_ = error;
    lock.unlock();
    changed_.notify_all();
  }
}

void AsyncCheckpointer::run(Job& job) {
  if (job.kind == JobKind::kFinish) {
    const SaveRecord record{job.state.step, job.state.optimizer_steps, world_.world_size(), model_.layout()};
    const int64_t bytes = finish_checkpoint(config_, job.path, record, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    finished_bytes_ = bytes;
    return;
  }
  if (job.copied) job.copied->synchronize();
  copy_host_pieces();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snapshot_taken_ = true;
  }
  changed_.notify_all();
  write_shard(job);
}

void AsyncCheckpointer::copy_host_pieces() {
  // Raw pointers only: this thread never calls into ATen.
  for (const auto& p : pieces_) {
    if (p.host_source != nullptr)
      std::memcpy(buffer_data_ + p.at, p.host_source, static_cast<size_t>(p.hi - p.lo) * sizeof(float));
  }
}

void AsyncCheckpointer::write_shard(const Job& job) {
  if (!model_.writes_checkpoint()) return;
  const int rank = world_.rank();
  ShardFileWriter file(job.path, "rank" + std::to_string(rank) + ".bin", {job.state.step, rank, unit_count_});
  for (const auto& p : pieces_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) throw Cancelled();
    }
    file.append(*p.spec, p.unit, p.kind, buffer_data_ + p.at, p.lo, p.lo, p.hi);
  }
  write_rank_index(job.path, rank, file.commit());
  std::lock_guard<std::mutex> lock(mutex_);
  written_during_step_ = training_step_.load();
}

}  // namespace meshrun::trainer

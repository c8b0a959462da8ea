// FlatParamUnit: one FSDP unit. Its parameters live in one flat buffer padded to a multiple of the world
// size; this rank owns one contiguous fp32 chunk (the master weights) and its gradient. Flat shards (the
// FSDP1 layout) make each unit's communication a single all-gather / reduce-scatter call.
//
// The unsharded buffer is a c10::Storage whose memory comes and goes: autograd keeps views of it for
// backward, so the storage object lives on while its bytes are freed after forward (FULL_SHARD) and
// re-gathered just before the unit's backward. Two autograd nodes place the communication:
//   GatherParams (between a per-unit anchor leaf and the buffer): its backward receives the gradient of the
//     whole flat buffer once, and reduce-scatters it (post-backward);
//   PreBackward (identity on the unit's output): its backward runs before the unit's own backward nodes,
//     and re-gathers the parameters and prefetches the previous unit (pre-backward).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/buffer_pool.hpp"
#include "trainer/model/model.hpp"

namespace meshrun::trainer {

/// Live and peak bytes of unsharded (gathered) parameters, shared by all units of a model.
struct GatheredBytes {
  int64_t live = 0;
  int64_t peak = 0;
  void add(int64_t n) {
    live += n;
    if (live > peak) peak = live;
  }
};

class FlatParamUnit;

struct UnitOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  at::ScalarType param_dtype = at::kFloat;
  at::ScalarType reduce_dtype = at::kFloat;
  bool prefetch = true;
  bool reshard_after_forward = true;  // false for the root: its backward follows its forward at once
  Communicator* replicas = nullptr;  // HYBRID_*: the ranks holding the same shard, all-reduced after the reduce-scatter
  bool cpu_offload = false;          // CUDA: shards, gradients (and so AdamW state) in pinned host memory
  BufferPool* pool = nullptr;        // CPU: where gathered buffers come from (nullptr: the default allocator)
  // Shared by a model's units: the unit whose gradient reduction was issued last. Issuing the next one
  // completes that one, so at most two unsharded gradients are alive during backward (not all of them).
  FlatParamUnit** last_reduce = nullptr;
};

class FlatParamUnit {
 public:
  /// `full_init` is the unit's full fp32 parameters (identical on every rank); only the local chunk is kept.
  /// Undefined: the chunk starts as zeros, for a loader to fill (model.init_from).
  FlatParamUnit(UnitSpec spec, const at::Tensor& full_init, Communicator& comm, UnitOptions options,
                GatheredBytes& gathered, const at::Device& device);
  FlatParamUnit(const FlatParamUnit&) = delete;
  FlatParamUnit& operator=(const FlatParamUnit&) = delete;

  const UnitSpec& spec() const { return spec_; }
  /// Gathers (or waits for a prefetch) and returns the parameter views in spec order; with grad mode
  /// on, the views are connected to the post-backward node.
  std::vector<at::Tensor> pre_forward();
  /// Frees the unsharded buffer when the strategy says so and attaches the pre-backward node to `out`.
  at::Tensor post_forward(const at::Tensor& out);
  /// Issues the all-gather now; pre_forward / pre_backward wait for it.
  void prefetch();
  /// Frees the unsharded buffer (no-op when it aliases the shard).
  void reshard();
  /// The units whose parameters to prefetch when this unit's backward starts (nearest first).
  void set_backward_prefetch(std::vector<FlatParamUnit*> previous) { backward_prefetch_ = std::move(previous); }
  /// Like pre_forward, but returns the flat buffer (connected to the post-backward node) itself.
  at::Tensor pre_forward_flat();
  /// Parameter views of a flat buffer of this unit, in spec order.
  std::vector<at::Tensor> views_of(const at::Tensor& flat) const;
  /// false: keep gradients locally (accumulate, no communication) until a step with sync.
  void set_requires_grad_sync(bool sync) { sync_ = sync; }
  /// HYBRID_*: waits for the reduce-scatter and issues the all-reduce across replicas (else no-op).
  void start_replica_reduce();
  /// Waits for this step's gradient reduction and adds it into shard_grad().
  void finish_grad_sync();
  /// Waits for the gradient reduction in flight and frees the unsharded gradient it was reading: the
  /// result goes into shard_grad() (hybrid: it stays pending for start_replica_reduce).
  void release_reduce_input();
  /// Starts a step's gradient: shard_grad() reads as zeros after finish_grad_sync() unless a reduction
  /// wrote it (the first result of the step is copied in, or written there by the reduce-scatter: no memset).
  void zero_grad();

  at::Tensor& shard() { return shard_; }
  /// Defined from the unit's gradient reduction until the next zero_grad() (on CUDA; always on the CPU).
  at::Tensor& shard_grad() { return shard_grad_; }
  /// What shard_grad() must be multiplied by to be the mean gradient over ranks: 1/ranks when the fp32
  /// reduction sums (the optimizer folds the division into its own pass), 1 when gradients were divided
  /// before a low-precision reduction.
  double grad_scale() const { return grad_scale_; }
  /// [begin, end) ranges of the local shard that receive weight decay.
  const std::vector<std::pair<int64_t, int64_t>>& decay_ranges() const { return decay_ranges_; }
  /// The full fp32 parameters (collective: every rank must call), without padding.
  at::Tensor full_fp32();

  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  /// This rank's chunk: [shard_offset, shard_offset + shard_numel) of the padded flat buffer.
  int64_t shard_offset() const { return shard_offset_; }
  int64_t shard_numel() const { return shard_numel_; }
  /// The group the unit is sharded over (the whole world unless hybrid).
  Communicator& shard_group() { return comm_; }
  int64_t unsharded_grad_bytes() const;

  // Called by the autograd nodes.
  at::Tensor unsharded_buffer() const;
  void pre_backward();
  void post_backward(const at::Tensor& flat_grad);

 private:
  // Construction, in this order.
  /// numel_, padded_numel_, shard_numel_, shard_offset_, and whether the unit is sharded at all.
  void place_shard();
  /// shard_ (this rank's chunk of `full_init`, or zeros), shard_grad_ and anchor_, on the device or offloaded.
  void init_shard(const at::Tensor& full_init);
  /// grad_scale_, and whether the reduce-scatter writes shard_grad_ directly.
  void plan_grad_reduction();
  /// storage_: the fp32 shard itself when aliased, else a fresh unsharded buffer, freed at once.
  void init_unsharded_storage();

  void materialize();
  /// shard_grad_ <- result (the step's first) or shard_grad_ += result.
  void accumulate_grad(const at::Tensor& result);
  /// An uninitialised unsharded buffer (param dtype) from the pool, or the default allocator.
  at::Tensor new_unsharded() const;

  UnitSpec spec_;
  Communicator& comm_;
  UnitOptions options_;
  GatheredBytes& gathered_;
  at::Device device_;
  // Where the parameters are: the unsharded buffer's bytes come and go, the shard always stays.
  enum class ParamState {
    kSharded,    // only the shard; the unsharded storage has no bytes
    kGathering,  // an all-gather into a fresh buffer is in flight (pending_gather_)
    kUnsharded,  // the unsharded storage holds the parameters
  };
  // Whether this step's gradient reduction has written shard_grad_ yet (zero_grad() is deferred).
  enum class GradState {
    kUnwritten,  // after zero_grad(): the first result is copied in (or reduced into it); none means zeros
    kWritten,    // later results are added
  };
  // Decided once, at construction, from the strategy, dtypes, devices and world size.
  struct Layout {
    bool sharded = true;                      // false: NO_SHARD or world size 1 (the shard is the full buffer)
    bool aliased = false;                     // the unsharded buffer is the fp32 shard itself: never freed or copied
    bool reduce_into_shard_grad = false;      // the reduce-scatter writes shard_grad_ itself (no copy, no add)
    bool release_grad_between_steps = false;  // CUDA: shard_grad_ is freed by zero_grad(), made by the backward
  };

  Layout layout_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int64_t shard_numel_ = 0;
  int64_t shard_offset_ = 0;
  std::vector<int64_t> split_sizes_;
  std::vector<std::pair<int64_t, int64_t>> decay_ranges_;

  at::Tensor shard_;       // fp32 master weights, this rank's chunk
  at::Tensor shard_grad_;  // fp32
  at::Tensor anchor_;      // leaf that requires grad, so the post-backward node is part of the graph
  c10::Storage storage_;   // the unsharded buffer (param dtype); bytes freed / re-gathered
  ParamState param_state_ = ParamState::kUnsharded;
  PendingOp pending_gather_;
  PendingOp pending_reduce_;
  PendingOp pending_replica_reduce_;
  at::Tensor grad_accum_;  // unsharded gradient kept across micro-batches without sync
  bool sync_ = true;       // this micro-batch's backward reduces (false: accumulate into grad_accum_)
  GradState grad_state_ = GradState::kWritten;
  double grad_scale_ = 1.0;
  std::vector<FlatParamUnit*> backward_prefetch_;
};

}  // namespace meshrun::trainer

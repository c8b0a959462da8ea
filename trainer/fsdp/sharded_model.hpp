// ShardedModel: the Llama model wrapped in FSDP units (root + one per block) and the forward pass that
// drives gathering, freeing and prefetching in unit order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainer/config/trainer_config.hpp"
#include "trainer/distributed/communicator.hpp"
#include "trainer/fsdp/activation_checkpoint.hpp"
#include "trainer/fsdp/flat_param_unit.hpp"
#include "trainer/model/model.hpp"

namespace meshrun::trainer {

at::ScalarType to_scalar_type(DType d);

class ShardedModel {
 public:
  /// `local_world_size` is the default shard group size of the HYBRID_* strategies (ranks per node).
  ShardedModel(const TrainerConfig& config, Communicator& comm, const at::Device& device, int local_world_size);

  /// tokens [B, T] int64 -> logits [B, T, vocab] in param_dtype.
  at::Tensor forward(const at::Tensor& tokens);
  void set_requires_grad_sync(bool sync);
  /// Waits for every unit's gradient reduction of this step.
  void finish_grad_sync();
  /// Frees every gathered buffer (after evaluation / sampling) and returns the pool's cache to the OS.
  void reshard_all();
  /// Bytes of gathered-parameter memory mapped now (in use + cached for reuse).
  size_t gathered_mapped_bytes() const { return pool_.mapped_bytes(); }

  std::vector<FlatParamUnit*> units();
  /// Where the squared gradient norms of the local shards are summed (nullptr: every rank holds every
  /// gradient, NO_SHARD).
  Communicator* norm_group();
  /// True on the ranks whose shards a checkpoint stores: replicas (NO_SHARD, hybrid) are written once.
  bool writes_checkpoint() const { return replica_index_ == 0; }
  /// "HYBRID_SHARD 2 x 2" style description of the layout.
  std::string layout() const;
  /// How the unit all-gathers and reduce-scatters move between this node's ranks (the shard group's, for
  /// hybrid): Communicator::intra_node_transport().
  const std::string& intra_node_transport() const {
    return shard_group_ ? shard_group_->intra_node_transport() : world_.intra_node_transport();
  }
  const GatheredBytes& gathered() const { return gathered_; }
  int64_t numel() const;
  /// Sum over units of the padded buffer sizes.
  int64_t padded_numel() const;
  /// All parameters in fp32, unit order, no padding. Collective: every rank must call it.
  at::Tensor full_params_fp32();

 private:
  // Construction, in this order.
  /// HYBRID_*: shard_group_ (G consecutive ranks, a node) and replica_group_ (the same position in every
  /// group). Collective: every rank creates both groups, shard group first.
  void set_up_hybrid_mesh(const FsdpConfig& fsdp, int local_world_size);
  /// The options every unit shares (reshard_after_forward is set per unit).
  UnitOptions shared_unit_options(const FsdpConfig& fsdp);
  /// units_: one per spec, sharded over the shard group (the world unless hybrid).
  void build_units(const TrainerConfig& config, const std::vector<UnitSpec>& specs, const UnitOptions& options);
  /// Caps pool_'s cache at the gathered bytes the strategy holds at its peak.
  void size_buffer_pool(at::ScalarType param_dtype);
  /// Each block's backward prefetches the limit_all_gathers blocks before it.
  void link_backward_prefetch();
  void make_block_functions();

  ModelConfig config_;
  bool prefetch_;
  int64_t limit_all_gathers_ = 1;
  int64_t ac_every_ = 0;
  ShardingStrategy strategy_;
  Communicator& world_;
  std::unique_ptr<Communicator> shard_group_;    // hybrid only
  std::unique_ptr<Communicator> replica_group_;  // hybrid only
  int replica_index_ = 0;
  std::vector<UnitFunction> block_fns_;
  at::Device device_;
  GatheredBytes gathered_;
  BufferPool pool_;  // gathered buffers (CPU): mmap'd, cached up to what the strategy holds at its peak
  FlatParamUnit* last_reduce_ = nullptr;               // the unit whose gradient reduction was issued last
  std::vector<std::unique_ptr<FlatParamUnit>> units_;  // [0] root, [1..] blocks
  Rope rope_;
};

}  // namespace meshrun::trainer

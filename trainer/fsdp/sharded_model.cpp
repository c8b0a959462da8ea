#include "trainer/fsdp/sharded_model.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "common/error.hpp"

namespace meshrun::trainer {

at::ScalarType to_scalar_type(DType d) {
  switch (d) {
    case DType::kFloat32: return at::kFloat;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat16: return at::kHalf;
  }
  return at::kFloat;
}

ShardedModel::ShardedModel(const TrainerConfig& config, Communicator& comm, const at::Device& device,
                           int local_world_size)
    : config_(config.model),
      prefetch_(config.fsdp.prefetch),
      limit_all_gathers_(config.fsdp.limit_all_gathers),
      ac_every_(config.fsdp.activation_checkpointing),
      strategy_(config.fsdp.strategy),
      world_(comm),
      device_(device) {
  const auto specs = build_unit_specs(config_);
  if (config.fsdp.hybrid()) {
    set_up_hybrid_mesh(config.fsdp, local_world_size);
  } else if (config.fsdp.strategy == ShardingStrategy::kNoShard) {
    replica_index_ = comm.rank();
  }
  const UnitOptions options = shared_unit_options(config.fsdp);
  build_units(config, specs, options);
  size_buffer_pool(options.param_dtype);
  link_backward_prefetch();
  rope_ = make_rope(config_, config_.max_seq_len, options.param_dtype, device_);
  make_block_functions();
}

void ShardedModel::set_up_hybrid_mesh(const FsdpConfig& fsdp, int local_world_size) {
  // 2-D mesh: rank = group * G + position. Shard inside a group (a node), replicate across groups.
  const int world = world_.world_size();
  const int g = fsdp.shard_group_size > 0 ? static_cast<int>(fsdp.shard_group_size) : local_world_size;
  if (g < 1 || world % g != 0) {
    throw UsageError(
        "fsdp.strategy=" + to_string(fsdp.strategy) + ": shard group size " + std::to_string(g) +
        " (fsdp.shard_group_size, or LOCAL_WORLD_SIZE when 0) must divide WORLD_SIZE=" + std::to_string(world));
  }
  const int group = world_.rank() / g;
  const int position = world_.rank() % g;
  std::vector<int> shard_ranks;
  for (int i = 0; i < g; ++i) shard_ranks.push_back(group * g + i);
  std::vector<int> replica_ranks;
  for (int i = 0; i < world / g; ++i) replica_ranks.push_back(i * g + position);
  // Every rank creates both groups, in this order.
  shard_group_ = world_.new_group(shard_ranks, "shard" + std::to_string(group));
  replica_group_ = world_.new_group(replica_ranks, "replica" + std::to_string(position));
  replica_index_ = group;
}

UnitOptions ShardedModel::shared_unit_options(const FsdpConfig& fsdp) {
  UnitOptions options;
  options.replicas = replica_group_.get();
  options.strategy = fsdp.strategy;
  options.cpu_offload = fsdp.cpu_offload;
  options.param_dtype = to_scalar_type(fsdp.param_dtype);
  options.reduce_dtype = to_scalar_type(fsdp.reduce_dtype);
  options.prefetch = fsdp.prefetch;
  options.pool = &pool_;
  options.last_reduce = &last_reduce_;
  return options;
}

void ShardedModel::build_units(const TrainerConfig& config, const std::vector<UnitSpec>& specs,
                               const UnitOptions& options) {
  Communicator& shard_comm = shard_group_ ? *shard_group_ : world_;
  for (size_t i = 0; i < specs.size(); ++i) {
    UnitOptions unit_options = options;
    // The root's backward follows its forward immediately, and so does the last block's (only the head runs
    // in between): freeing them would only re-gather the same bytes at once.
    unit_options.reshard_after_forward = i != 0 && i + 1 != specs.size();
    // Every rank builds the same full values one unit at a time, then keeps only its chunk. With
    // model.init_from every chunk is read from the files instead: no full-size unit exists anywhere (an 8B
    // model's root unit alone is 4 GB).
    const at::Tensor full = config.model.init_from.empty()
                                ? init_unit(specs[i], config_, config.train.seed, static_cast<int64_t>(i))
                                : at::Tensor();
    units_.push_back(std::make_unique<FlatParamUnit>(specs[i], full, shard_comm, unit_options, gathered_, device_));
  }
}

void ShardedModel::size_buffer_pool(at::ScalarType param_dtype) {
  // The pool keeps released buffers up to what the strategy holds gathered at its peak, so a step reuses
  // mapped pages instead of faulting fresh ones and the cache never raises the peak. FULL_SHARD: the root,
  // the computing block, the prefetched ones and the last block (kept from its forward to its backward).
  const bool frees = strategy_ == ShardingStrategy::kFullShard || strategy_ == ShardingStrategy::kHybridShard;
  const size_t elem = at::elementSize(param_dtype);
  size_t all = 0;
  size_t largest_block = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    const size_t bytes = static_cast<size_t>(units_[i]->padded_numel()) * elem;
    all += bytes;
    if (i > 0) largest_block = std::max(largest_block, bytes);
  }
  const size_t root = static_cast<size_t>(units_[0]->padded_numel()) * elem;
  pool_.set_max_cached_bytes(frees ? std::min(all, root + (static_cast<size_t>(limit_all_gathers_) + 2) * largest_block)
                                   : all);
}

void ShardedModel::link_backward_prefetch() {
  // Backward runs blocks last to first; block 0's predecessor is the root, which stays gathered.
  for (size_t i = 2; i < units_.size(); ++i) {
    std::vector<FlatParamUnit*> previous;
    for (size_t j = i - 1; j >= 1 && previous.size() < static_cast<size_t>(limit_all_gathers_); --j) {
      previous.push_back(units_[j].get());
    }
    units_[i]->set_backward_prefetch(previous);
  }
}

void ShardedModel::make_block_functions() {
  // Stable closures for activation checkpointing (the recompute in backward calls them again).
  block_fns_.assign(units_.size(), UnitFunction{});
  for (size_t i = 1; i < units_.size(); ++i) {
    block_fns_[i] = [this](const at::Tensor& x, const std::vector<at::Tensor>& p) {
      return block_forward(x, p, rope_, config_);
    };
  }
}

at::Tensor ShardedModel::forward(const at::Tensor& tokens) {
  auto& root = *units_[0];
  const auto root_params = root.pre_forward();
  if (prefetch_ && units_.size() > 1) units_[1]->prefetch();
  at::Tensor x = embed_forward(tokens.to(device_), root_params);
  for (size_t i = 1; i < units_.size(); ++i) {
    auto& unit = *units_[i];
    const at::Tensor flat = unit.pre_forward_flat();
    if (prefetch_) {
      // Overlaps with this block's compute; at most limit_all_gathers gathers are in flight.
      for (size_t j = i + 1; j < units_.size() && j <= i + static_cast<size_t>(limit_all_gathers_); ++j)
        units_[j]->prefetch();
    }
    const bool recompute = ac_every_ > 0 && at::GradMode::is_enabled() && (i - 1) % static_cast<size_t>(ac_every_) == 0;
    x = unit.post_forward(recompute ? checkpointed_forward(block_fns_[i], unit, x, flat)
                                    : block_fns_[i](x, unit.views_of(flat)));
  }
  at::Tensor logits = head_forward(x, root_params, config_);
  return root.post_forward(logits);
}

void ShardedModel::set_requires_grad_sync(bool sync) {
  for (auto& u : units_) u->set_requires_grad_sync(sync);
}

void ShardedModel::finish_grad_sync() {
  last_reduce_ = nullptr;
  // Two passes so every unit's all-reduce across replicas is in flight before the first one is waited for.
  for (auto& u : units_) u->start_replica_reduce();
  for (auto& u : units_) u->finish_grad_sync();
}

Communicator* ShardedModel::norm_group() {
  if (strategy_ == ShardingStrategy::kNoShard) return nullptr;
  return shard_group_ ? shard_group_.get() : &world_;
}

std::string ShardedModel::layout() const {
  if (!shard_group_) return to_string(strategy_);
  return to_string(strategy_) + " (" + std::to_string(replica_group_->world_size()) + " replicas x " +
         std::to_string(shard_group_->world_size()) + " shards)";
}

void ShardedModel::reshard_all() {
  for (auto& u : units_) u->reshard();
  pool_.trim();
}

std::vector<FlatParamUnit*> ShardedModel::units() {
  std::vector<FlatParamUnit*> out;
  for (auto& u : units_) out.push_back(u.get());
  return out;
}

int64_t ShardedModel::numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->numel();
  return n;
}

int64_t ShardedModel::padded_numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u->padded_numel();
  return n;
}

at::Tensor ShardedModel::full_params_fp32() {
  std::vector<at::Tensor> parts;
  for (auto& u : units_) parts.push_back(u->full_fp32());
  return at::cat(parts);
}

}  // namespace meshrun::trainer

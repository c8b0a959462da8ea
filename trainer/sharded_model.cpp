#include "trainer/sharded_model.hpp"

#include <ATen/ATen.h>

namespace meshrun::trainer {

at::ScalarType to_scalar_type(DType d) {
  switch (d) {
    case DType::Float32: return at::kFloat;
    case DType::BFloat16: return at::kBFloat16;
    case DType::Float16: return at::kHalf;
  }
  return at::kFloat;
}

ShardedModel::ShardedModel(const TrainerConfig& config, Communicator& comm, const at::Device& device)
    : config_(config.model), prefetch_(config.fsdp.prefetch), device_(device) {
  const auto specs = build_unit_specs(config_);
  UnitOptions options;
  options.strategy = config.fsdp.strategy;
  options.param_dtype = to_scalar_type(config.fsdp.param_dtype);
  options.reduce_dtype = to_scalar_type(config.fsdp.reduce_dtype);
  options.prefetch = config.fsdp.prefetch;
  for (size_t i = 0; i < specs.size(); ++i) {
    UnitOptions unit_options = options;
    unit_options.reshard_after_forward = i != 0;  // the root's backward follows its forward immediately
    // Every rank builds the same full values one unit at a time, then keeps only its chunk.
    at::Tensor full = init_unit(specs[i], config_, config.train.seed, static_cast<int64_t>(i));
    units_.push_back(std::make_unique<FlatParamUnit>(specs[i], full, comm, unit_options, gathered_, device_));
  }
  // Backward runs blocks last to first; block 0's predecessor is the root, which stays gathered.
  for (size_t i = 2; i < units_.size(); ++i) units_[i]->set_backward_prefetch(units_[i - 1].get());
  rope_ = make_rope(config_, config_.max_seq_len, options.param_dtype, device_);
}

at::Tensor ShardedModel::forward(const at::Tensor& tokens) {
  auto& root = *units_[0];
  const auto root_params = root.pre_forward();
  if (prefetch_ && units_.size() > 1) units_[1]->prefetch();
  at::Tensor x = embed_forward(tokens.to(device_), root_params);
  for (size_t i = 1; i < units_.size(); ++i) {
    const auto params = units_[i]->pre_forward();
    if (prefetch_ && i + 1 < units_.size()) units_[i + 1]->prefetch();  // overlaps with this block's compute
    x = units_[i]->post_forward(block_forward(x, params, rope_, config_));
  }
  at::Tensor logits = head_forward(x, root_params, config_);
  return root.post_forward(logits);
}

void ShardedModel::set_requires_grad_sync(bool sync) {
  for (auto& u : units_) u->set_requires_grad_sync(sync);
}

void ShardedModel::finish_grad_sync() {
  for (auto& u : units_) u->finish_grad_sync();
}

void ShardedModel::reshard_all() {
  for (auto& u : units_) u->reshard();
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

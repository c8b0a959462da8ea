#include "trainer/adamw.hpp"

#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace meshrun::trainer {

double learning_rate(const TrainConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  const double span = static_cast<double>(std::max<int64_t>(1, c.steps - c.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(const TrainConfig& config, std::vector<FlatParamUnit*> units) : config_(config), units_(std::move(units)) {
  for (auto* u : units_) {
    exp_avg_.push_back(at::zeros_like(u->shard()));
    exp_avg_sq_.push_back(at::zeros_like(u->shard()));
  }
}

void AdamW::zero_grad() {
  for (auto* u : units_) u->shard_grad().zero_();
}

double AdamW::global_grad_norm(Communicator* group) {
  at::Tensor sq = at::zeros({1}, units_.front()->shard().options().dtype(at::kDouble));
  // One pass per shard, accumulated in double without materialising a double copy of the gradient.
  for (auto* u : units_) sq += at::linalg_vector_norm(u->shard_grad(), 2, {}, false, at::kDouble).square();
  if (group != nullptr && group->world_size() > 1) {
    if (group->backend_name() == "nccl" && !sq.is_cuda()) sq = sq.to(at::kCUDA);  // offloaded shards: NCCL needs device memory
    PendingOp op = group->all_reduce(sq);
    group->wait(op);
  }
  return std::sqrt(sq.item<double>());
}

void AdamW::clip(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return;
  const double scale = max_norm / (norm + 1e-6);
  for (auto* u : units_) u->shard_grad().mul_(scale);
}

void AdamW::step(double lr) {
  ++step_;
  const double bc1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < units_.size(); ++i) {
    at::Tensor& p = units_[i]->shard();
    const at::Tensor& g = units_[i]->shard_grad();
    // Decoupled decay, only on matrix ranges (norm gains are excluded).
    if (config_.weight_decay > 0) {
      for (const auto& [begin, end] : units_[i]->decay_ranges()) {
        p.narrow(0, begin, end - begin).mul_(1.0 - lr * config_.weight_decay);
      }
    }
    exp_avg_[i].lerp_(g, 1.0 - config_.beta1);
    exp_avg_sq_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) n += static_cast<int64_t>(exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes());
  return n;
}

}  // namespace meshrun::trainer

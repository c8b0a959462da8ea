#include "trainer/fsdp/adamw.hpp"

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
    // The complement of the decay ranges (sorted, disjoint) within the shard.
    std::vector<std::pair<int64_t, int64_t>> rest;
    int64_t at = 0;
    for (const auto& [begin, end] : u->decay_ranges()) {
      if (begin > at) rest.emplace_back(at, begin);
      at = end;
    }
    if (at < u->shard_numel()) rest.emplace_back(at, u->shard_numel());
    no_decay_ranges_.push_back(std::move(rest));
  }
}

void AdamW::zero_grad() {
  for (auto* u : units_) u->zero_grad();
  clip_factor_ = 1.0;
}

double AdamW::global_grad_norm(Communicator* group) {
  at::Tensor sq = at::zeros({1}, units_.front()->shard().options().dtype(at::kDouble));
  // One fp32 pass per shard (ATen's cascade summation keeps it accurate), the shards summed in double. A
  // norm computed in double converts every element: 4x slower on the CPU, where offloaded shards live
  // (measured on 1.15B elements: 1.47 s vs 0.38 s).
  for (auto* u : units_) {
    sq += at::linalg_vector_norm(u->shard_grad(), 2).to(at::kDouble).square() * (u->grad_scale() * u->grad_scale());
  }
  if (group != nullptr && group->world_size() > 1) {
    sq = sq.to(group->device());  // offloaded shards live in host memory; the collective needs the device
    PendingOp op = group->all_reduce(sq);
    group->wait(op);
  }
  return std::sqrt(sq.item<double>());
}

void AdamW::clip(double norm, double max_norm) {
  clip_factor_ = 1.0;
  if (max_norm <= 0 || norm <= max_norm) return;
  clip_factor_ = max_norm / (norm + 1e-6);
}

void AdamW::step(double lr) {
  ++step_;
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < units_.size(); ++i) {
    at::Tensor& p = units_[i]->shard();
    at::Tensor& g = units_[i]->shard_grad();
    const auto opts = p.options().dtype(at::kFloat);
    // The fused kernel divides the gradient by grad_scale (written back): mean over ranks and clipping.
    const double scale = units_[i]->grad_scale() * clip_factor_;
    const std::optional<at::Tensor> grad_scale =
        scale == 1.0 ? std::nullopt : std::optional<at::Tensor>(at::full({}, 1.0 / scale, opts));
    const at::Tensor step = at::full({}, static_cast<double>(step_), opts);
    // Decoupled weight decay on matrix ranges only: one fused call with decay, one without.
    for (const bool decay : {true, false}) {
      const auto& ranges = decay ? units_[i]->decay_ranges() : no_decay_ranges_[i];
      std::vector<at::Tensor> ps, gs, ms, vs, steps;
      for (const auto& [begin, end] : ranges) {
        ps.push_back(p.narrow(0, begin, end - begin));
        gs.push_back(g.narrow(0, begin, end - begin));
        ms.push_back(exp_avg_[i].narrow(0, begin, end - begin));
        vs.push_back(exp_avg_sq_[i].narrow(0, begin, end - begin));
        steps.push_back(step);
      }
      if (ps.empty()) continue;
      at::_fused_adamw_(ps, gs, ms, vs, {}, steps, lr, config_.beta1, config_.beta2, decay ? config_.weight_decay : 0.0,
                        config_.eps, /*amsgrad=*/false, /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
    }
  }
  clip_factor_ = 1.0;
}

int64_t AdamW::state_bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    n += static_cast<int64_t>(exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes());
  return n;
}

}  // namespace meshrun::trainer

#include "trainer/fsdp/flat_param_unit.hpp"

#include <algorithm>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

FlatParamUnit* unit_of(AutogradContext* ctx) {
  return reinterpret_cast<FlatParamUnit*>(ctx->saved_data["unit"].toInt());
}

// A tensor over the whole storage that is not a view of anything autograd knows about.
at::Tensor over_storage(const c10::Storage& storage, int64_t numel, at::ScalarType dtype, const at::Device& device) {
  c10::NoGradGuard no_grad;
  return at::empty({0}, at::TensorOptions().dtype(dtype).device(device)).set_(storage, 0, {numel}, {1});
}

// anchor -> full flat buffer. Backward gets d(loss)/d(buffer) summed over every parameter view.
struct GatherParams : public torch::autograd::Function<GatherParams> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*anchor*/, int64_t unit) {
    ctx->saved_data["unit"] = unit;
    // A fresh tensor over the storage (not a view of an input): autograd metadata goes on it alone.
    return unit_of(ctx)->unsharded_buffer();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    unit_of(ctx)->post_backward(grads[0]);
    return {at::Tensor(), at::Tensor()};
  }
};

// Identity on a unit's output; its backward runs right before the unit's own backward.
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t unit) {
    ctx->saved_data["unit"] = unit;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    unit_of(ctx)->pre_backward();
    return {grads[0], at::Tensor()};
  }
};

// split_with_sizes() sizes of a unit's flat buffer: one per parameter, then the padding (if any).
std::vector<int64_t> split_sizes_of(const UnitSpec& spec, int64_t padded_numel) {
  std::vector<int64_t> sizes;
  for (const auto& p : spec.params) sizes.push_back(p.numel());
  if (padded_numel > spec.numel()) sizes.push_back(padded_numel - spec.numel());
  return sizes;
}

// [begin, end) ranges of the shard [shard_offset, shard_offset + shard_numel) that hold parameters with
// weight decay, relative to the shard.
std::vector<std::pair<int64_t, int64_t>> decay_ranges_in_shard(const UnitSpec& spec, int64_t shard_offset,
                                                               int64_t shard_numel) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for_each_param_slice(spec, shard_offset, shard_offset + shard_numel, [&](const ParamSlice& slice) {
    if (!slice.param.decay) return;
    const int64_t begin = slice.at - shard_offset;
    const int64_t end = begin + slice.count;
    if (!ranges.empty() && ranges.back().second == begin) {
      ranges.back().second = end;  // adjacent matrices: one range
    } else {
      ranges.emplace_back(begin, end);
    }
  });
  return ranges;
}

}  // namespace

FlatParamUnit::FlatParamUnit(UnitSpec spec, const at::Tensor& full_init, Communicator& comm, UnitOptions options,
                             GatheredBytes& gathered, const at::Device& device)
    : spec_(std::move(spec)), comm_(comm), options_(options), gathered_(gathered), device_(device) {
  place_shard();
  init_shard(full_init);
  split_sizes_ = split_sizes_of(spec_, padded_numel_);
  decay_ranges_ = decay_ranges_in_shard(spec_, shard_offset_, shard_numel_);
  plan_grad_reduction();
  init_unsharded_storage();
}

void FlatParamUnit::place_shard() {
  const int64_t world = comm_.world_size();
  numel_ = spec_.numel();
  layout_.sharded = options_.strategy != ShardingStrategy::kNoShard && world > 1;
  padded_numel_ = layout_.sharded ? (numel_ + world - 1) / world * world : numel_;
  shard_numel_ = layout_.sharded ? padded_numel_ / world : padded_numel_;
  shard_offset_ = layout_.sharded ? static_cast<int64_t>(comm_.rank()) * shard_numel_ : 0;
}

void FlatParamUnit::init_shard(const at::Tensor& full_init) {
  // CPU offload keeps the master weights (and with them gradients and AdamW state) in pinned host memory;
  // on a CPU device there is nowhere to offload to, so it is a no-op.
  const bool offload = options_.cpu_offload && device_.is_cuda();
  if (full_init.defined()) {
    at::Tensor padded = at::zeros({padded_numel_}, at::kFloat);
    padded.narrow(0, 0, numel_).copy_(full_init);
    shard_ = padded.narrow(0, shard_offset_, shard_numel_).clone();
  } else {
    shard_ = at::zeros({shard_numel_}, at::kFloat);  // filled by a loader: no full-size buffer at all
  }
  shard_ = offload ? shard_.pin_memory() : shard_.to(device_);
  // Pinned as well when offloaded: the device-to-host copy of each step's gradient is then one DMA.
  shard_grad_ = offload ? at::zeros_like(shard_).pin_memory() : at::zeros_like(shard_);
  // On a GPU the gradient shard exists only from its unit's backward to the optimizer step, as PyTorch's
  // zero_grad(set_to_none=True) does: the caching allocator makes that free, and the backward's peak (the
  // loss's logits) then does not sit on top of every unit's gradient. On the CPU, freeing and re-faulting
  // those pages every step would cost time; pinned (offloaded) host memory is slow to allocate.
  layout_.release_grad_between_steps = device_.is_cuda() && !offload;
  anchor_ = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_)).requires_grad_(true);
}

void FlatParamUnit::plan_grad_reduction() {
  // fp32 reductions sum, and the optimizer divides by the number of ranks in its fused pass; fp16/bf16
  // reductions divide first to stay in range.
  const int replicas = options_.replicas != nullptr ? options_.replicas->world_size() : 1;
  const int ranks = comm_.world_size() * replicas;
  grad_scale_ = options_.reduce_dtype == at::kFloat ? 1.0 / ranks : 1.0;
  // A fresh reduce-scatter result is exactly what shard_grad_ must hold after zero_grad() + add, so the
  // collective writes it directly (not for hybrid: the replica all-reduce follows).
  layout_.reduce_into_shard_grad = layout_.sharded && options_.reduce_dtype == at::kFloat &&
                                   options_.replicas == nullptr && shard_grad_.device() == device_;
}

void FlatParamUnit::init_unsharded_storage() {
  layout_.aliased = !layout_.sharded && options_.param_dtype == at::kFloat && shard_.device() == device_;
  param_state_ = ParamState::kUnsharded;
  if (layout_.aliased) {
    storage_ = shard_.storage();
  } else {
    storage_ = new_unsharded().storage();
    gathered_.add(static_cast<int64_t>(storage_.nbytes()));
    reshard();
  }
}

at::Tensor FlatParamUnit::unsharded_buffer() const {
  return over_storage(storage_, padded_numel_, options_.param_dtype, device_);
}

at::Tensor FlatParamUnit::new_unsharded() const {
  const auto opts = at::TensorOptions().dtype(options_.param_dtype).device(device_);
  if (options_.pool == nullptr || !device_.is_cpu()) return at::empty({padded_numel_}, opts);
  const size_t nbytes = static_cast<size_t>(padded_numel_) * at::elementSize(options_.param_dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, options_.pool->allocate(nbytes), nullptr, false);
  return at::empty({0}, opts).set_(storage, 0, {padded_numel_}, {1});
}

void FlatParamUnit::prefetch() {
  if (param_state_ != ParamState::kSharded) return;
  at::Tensor out = new_unsharded();
  // Cast before gathering: the wire carries param_dtype, as FSDP's mixed precision does. An offloaded shard
  // is copied to the device asynchronously (pinned memory) and cast there: a host-to-device copy that also
  // changes the dtype converts on the CPU into pageable memory first, and then cannot be asynchronous.
  at::Tensor in = shard_.to(device_, /*non_blocking=*/true).to(options_.param_dtype);
  if (!layout_.sharded) {
    out.copy_(in);
    pending_gather_ = PendingOp{nullptr, out, in, {}};
  } else {
    pending_gather_ = comm_.all_gather(out, in);
  }
  param_state_ = ParamState::kGathering;
}

void FlatParamUnit::materialize() {
  if (param_state_ == ParamState::kUnsharded) return;
  if (param_state_ == ParamState::kSharded) prefetch();
  comm_.wait(pending_gather_);
  // Move the gathered bytes into the long-lived storage: every saved view of it sees them.
  auto* src = pending_gather_.output.storage().unsafeGetStorageImpl();
  auto* dst = storage_.unsafeGetStorageImpl();
  const size_t nbytes = src->nbytes();
  dst->set_data_ptr_noswap(src->set_data_ptr(at::DataPtr(nullptr, device_)));
  dst->set_nbytes(nbytes);
  src->set_nbytes(0);
  pending_gather_ = PendingOp{};
  param_state_ = ParamState::kUnsharded;
  gathered_.add(static_cast<int64_t>(nbytes));
}

void FlatParamUnit::reshard() {
  if (layout_.aliased || param_state_ != ParamState::kUnsharded) return;
  auto* impl = storage_.unsafeGetStorageImpl();
  gathered_.add(-static_cast<int64_t>(impl->nbytes()));
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, device_));
  impl->set_nbytes(0);
  param_state_ = ParamState::kSharded;
}

at::Tensor FlatParamUnit::pre_forward_flat() {
  materialize();
  return at::GradMode::is_enabled() ? GatherParams::apply(anchor_, reinterpret_cast<int64_t>(this))
                                    : unsharded_buffer();
}

std::vector<at::Tensor> FlatParamUnit::pre_forward() { return views_of(pre_forward_flat()); }

std::vector<at::Tensor> FlatParamUnit::views_of(const at::Tensor& flat) const {
  // One split node: backward concatenates the parameter gradients into one flat gradient.
  auto pieces = flat.split_with_sizes(split_sizes_);
  std::vector<at::Tensor> views;
  views.reserve(spec_.params.size());
  for (size_t i = 0; i < spec_.params.size(); ++i) views.push_back(pieces[i].view(spec_.params[i].shape));
  return views;
}

at::Tensor FlatParamUnit::post_forward(const at::Tensor& out) {
  if (!at::GradMode::is_enabled()) {
    reshard();  // no backward will need them
    return out;
  }
  const bool frees =
      options_.strategy == ShardingStrategy::kFullShard || options_.strategy == ShardingStrategy::kHybridShard;
  if (options_.reshard_after_forward && frees) reshard();
  return PreBackward::apply(out, reinterpret_cast<int64_t>(this));
}

void FlatParamUnit::pre_backward() {
  materialize();
  if (options_.prefetch) {
    for (auto* u : backward_prefetch_) u->prefetch();
  }
}

void FlatParamUnit::post_backward(const at::Tensor& flat_grad) {
  if (!flat_grad.defined()) return;
  if (!sync_) {
    // no_sync: accumulate the unsharded gradient locally, communicate on the last micro-batch only.
    if (grad_accum_.defined()) {
      grad_accum_.add_(flat_grad.to(options_.reduce_dtype));
    } else {
      grad_accum_ = flat_grad.to(options_.reduce_dtype, /*non_blocking=*/false, /*copy=*/true);
    }
  } else {
    // The flat gradient is a fresh tensor autograd hands over and never reads again (the concatenation of
    // the split's gradients, or the recomputation's result): reduce it in place unless a cast is needed.
    // Alone (one rank), nothing is reduced: the gradient goes as it is, cast on its way into shard_grad().
    const int replicas = options_.replicas != nullptr ? options_.replicas->world_size() : 1;
    const int ranks = comm_.world_size() * replicas;
    const bool alone = ranks == 1 && !grad_accum_.defined();
    at::Tensor g = alone ? flat_grad : flat_grad.to(options_.reduce_dtype);
    if (grad_accum_.defined()) {
      g.add_(grad_accum_);
      grad_accum_ = at::Tensor();
    }
    // Mean over ranks: fp32 sums and grad_scale() tells the optimizer to divide; a low-precision reduction
    // divides before the sum to stay in range.
    if (ranks > 1 && grad_scale_ == 1.0) g.div_(ranks);
    if (ranks == 1) {
      pending_reduce_ = PendingOp{nullptr, g, {}, {}};
    } else if (!layout_.sharded) {
      // Replicated inside the group: one all-reduce over every rank that holds this unit.
      pending_reduce_ = comm_.world_size() > 1 ? comm_.all_reduce(g) : PendingOp{nullptr, g, {}, {}};
    } else {
      // FlatParamUnit::finish_grad_sync() knows the output aliases shard_grad_ and skips the add.
      const bool direct =
          layout_.reduce_into_shard_grad && grad_state_ == GradState::kUnwritten && !pending_reduce_.valid();
      if (direct && !shard_grad_.defined()) shard_grad_ = at::empty({shard_numel_}, g.options());
      at::Tensor out = direct ? shard_grad_ : at::empty({shard_numel_}, g.options());
      if (direct) grad_state_ = GradState::kWritten;
      pending_reduce_ = comm_.reduce_scatter(out, g);
    }
    // Keep two reductions in flight at most: the previous unit's unsharded gradient is freed now.
    if (options_.last_reduce != nullptr) {
      if (*options_.last_reduce != nullptr && *options_.last_reduce != this)
        (*options_.last_reduce)->release_reduce_input();
      *options_.last_reduce = this;
    }
  }
  reshard();
}

void FlatParamUnit::start_replica_reduce() {
  if (options_.replicas == nullptr || options_.replicas->world_size() == 1 || !pending_reduce_.valid()) return;
  // Hybrid: the shard group's reduce-scatter gave this rank its chunk summed over the group; sum that chunk
  // over the replica groups (ranks with the same position in other groups).
  comm_.wait(pending_reduce_);
  pending_replica_reduce_ = options_.replicas->all_reduce(pending_reduce_.output);
  pending_reduce_ = PendingOp{};
}

void FlatParamUnit::release_reduce_input() {
  if (!pending_reduce_.valid()) return;
  if (options_.replicas == nullptr) {
    finish_grad_sync();  // the result lands in shard_grad_ and every temporary goes
    return;
  }
  // Hybrid: the all-reduce across replicas still reads the reduce-scatter's output; the input can go.
  comm_.wait(pending_reduce_);
  if (!pending_reduce_.input.is_same(pending_reduce_.output)) pending_reduce_.input = at::Tensor();
}

void FlatParamUnit::zero_grad() {
  // Deferred: the step's first result is copied into shard_grad_ (or written there by the collective), so
  // the memset and the add of a zeroed buffer are saved; finish_grad_sync() zeroes only if nothing came.
  grad_state_ = GradState::kUnwritten;
  if (layout_.release_grad_between_steps) shard_grad_ = at::Tensor();
}

void FlatParamUnit::accumulate_grad(const at::Tensor& result) {
  // Cast where the result is: a device-to-host copy that also casts goes through a pageable host buffer and
  // converts there (measured: 1.58 s for a 1.15B bf16 gradient into pinned fp32, against a plain DMA).
  const at::Tensor g = result.to(at::kFloat);
  if (grad_state_ == GradState::kUnwritten && !shard_grad_.defined()) {
    shard_grad_ = g.to(device_);  // a fresh fp32 result on the device becomes the shard gradient as it is
  } else if (grad_state_ == GradState::kUnwritten) {
    shard_grad_.copy_(g);  // device to pinned host when offloaded: one DMA
  } else {
    shard_grad_.add_(g.to(shard_grad_.device()));
  }
  grad_state_ = GradState::kWritten;
}

void FlatParamUnit::finish_grad_sync() {
  if (pending_replica_reduce_.valid() && !pending_reduce_.valid()) {
    options_.replicas->wait(pending_replica_reduce_);
    accumulate_grad(pending_replica_reduce_.output);
    pending_replica_reduce_ = PendingOp{};
    return;
  }
  if (!pending_reduce_.valid()) {
    if (grad_state_ == GradState::kUnwritten) {  // no reduction wrote it this step
      shard_grad_ =
          shard_grad_.defined() ? shard_grad_.zero_() : at::zeros_like(shard_, shard_.options().device(device_));
    }
    grad_state_ = GradState::kWritten;
    return;
  }
  comm_.wait(pending_reduce_);
  if (pending_reduce_.output.is_same(shard_grad_)) {
    grad_state_ = GradState::kWritten;  // the reduce-scatter wrote it directly
  } else {
    accumulate_grad(pending_reduce_.output);
  }
  pending_reduce_ = PendingOp{};
}

int64_t FlatParamUnit::unsharded_grad_bytes() const {
  return grad_accum_.defined() ? static_cast<int64_t>(grad_accum_.nbytes()) : 0;
}

at::Tensor FlatParamUnit::full_fp32() {
  c10::NoGradGuard no_grad;
  at::Tensor out = at::empty({padded_numel_}, shard_.options().device(device_));
  if (layout_.sharded) {
    PendingOp op = comm_.all_gather(out, shard_.to(device_));
    comm_.wait(op);
  } else {
    out.copy_(shard_);
  }
  return out.narrow(0, 0, numel_).to(at::kCPU);
}

}  // namespace meshrun::trainer

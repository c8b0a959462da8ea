// The Llama-style decoder described as FSDP units: token embedding, N blocks (RMSNorm, causal
// self-attention with rotary positions and optional grouped KV heads, SwiGLU MLP), final RMSNorm and a
// tied or untied head. Parameters are not owned here: forward functions take views of a unit's flat
// buffer, so the sharding layer decides where the memory lives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainer/model/model_config.hpp"

namespace meshrun::trainer {

enum class InitKind { kNormal, kScaledNormal, kOnes };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitKind init = InitKind::kNormal;
  bool decay = true;  // weight decay applies (matrices yes, norm gains no)
  int64_t numel() const;
};

struct UnitSpec {
  std::string name;  // "root" or "block<i>"
  std::vector<ParamSpec> params;
  int64_t numel() const;
};

/// The part of one parameter that falls inside a unit-flat range: elements [begin, begin + count) of the
/// parameter, which sit at unit-flat element `at`.
struct ParamSlice {
  const ParamSpec& param;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t at = 0;
};

/// Calls visit(ParamSlice) for each parameter of `unit` that overlaps the unit-flat range [lo, hi), in
/// spec order: the walk every shard, file chunk and copy in memory is cut by.
template <class Visit>
void for_each_param_slice(const UnitSpec& unit, int64_t lo, int64_t hi, Visit&& visit) {
  int64_t offset = 0;
  for (const auto& param : unit.params) {
    const int64_t begin = std::max(lo, offset);
    const int64_t end = std::min(hi, offset + param.numel());
    if (begin < end) visit(ParamSlice{param, begin - offset, end - begin, begin});
    offset += param.numel();
  }
}

/// Unit 0 is the root (embedding, final norm, untied head); units 1..n_layers are the blocks.
std::vector<UnitSpec> build_unit_specs(const ModelConfig& config);

/// The full fp32 parameters of one unit, flattened in spec order, deterministic in (seed, unit index):
/// every rank produces the same values whatever the world size.
at::Tensor init_unit(const UnitSpec& spec, const ModelConfig& config, uint64_t seed, int64_t unit_index);

int64_t count_params(const ModelConfig& config);
/// Training FLOPs per token: 6 * (matmul params) + 12 * n_layers * dim * seq_len (attention scores).
double train_flops_per_token(const ModelConfig& config, int64_t seq_len);

/// cos/sin tables [seq_len, head_dim] for rotary embeddings, in `dtype`. `sin` carries the sign of the
/// rotate-half layout ([-sin, sin] over the two halves), so the rotation is one swap of the halves.
struct Rope {
  at::Tensor cos;
  at::Tensor sin;
};
Rope make_rope(const ModelConfig& config, int64_t seq_len, at::ScalarType dtype, const at::Device& device);

/// tokens [B, T] int64 -> hidden [B, T, dim]. `root` are the root unit's parameter views.
at::Tensor embed_forward(const at::Tensor& tokens, const std::vector<at::Tensor>& root);
/// One transformer block; `p` are the block unit's parameter views in spec order.
at::Tensor block_forward(const at::Tensor& x, const std::vector<at::Tensor>& p, const Rope& rope,
                         const ModelConfig& config);
/// Final norm + head -> logits [B, T, vocab] in the compute dtype.
at::Tensor head_forward(const at::Tensor& x, const std::vector<at::Tensor>& root, const ModelConfig& config);

}  // namespace meshrun::trainer

#include "trainer/checkpoint/hf_import.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/hf_weights.hpp"
#include "trainer/model/hf_llama.hpp"

namespace meshrun::trainer {
namespace {

using Clock = std::chrono::steady_clock;

std::string shape_text(const std::vector<int64_t>& shape) { return nlohmann::json(shape).dump(); }

// Every tensor the model needs, with its shape; every tensor in the folder accounted for.
void check_tensors(HfWeights& weights, const std::vector<FlatParamUnit*>& units, const ModelConfig& model) {
  std::set<std::string> wanted;
  for (const auto* unit : units) {
    for (const auto& p : unit->spec().params) {
      const std::string name = hf_llama_name(unit->spec().name, p.name);
      wanted.insert(name);
      const SafetensorsTensor* t = weights.find(name);
      if (t == nullptr) {
        throw Error("model.init_from: " + weights.folder() + " has no tensor " + name + " (the model built from its " +
                    "config.json needs it" + (p.name == "output" ? "; tie_word_embeddings is false" : "") + ")");
      }
      if (t->shape != p.shape) {
        throw Error("model.init_from: tensor " + name + " in " + weights.file_of(name) + " has shape " +
                    shape_text(t->shape) + ", but config.json's model needs " + shape_text(p.shape));
      }
    }
  }
  for (const auto& name : weights.names()) {
    if (wanted.count(name) != 0 || hf_llama_ignorable(name)) continue;
    // A tied model's export may still carry lm_head (a copy of the embedding): the embedding is what counts.
    if (model.tie_embeddings && name == "lm_head.weight") continue;
    throw Error("model.init_from: " + weights.file_of(name) + " holds tensor " + name +
                ", which has no place in a Llama model of this config (another architecture?)");
  }
}

// This rank's chunk of one unit: the parts of each parameter that fall inside [lo, hi) of the flat unit.
int64_t read_unit(HfWeights& weights, FlatParamUnit& unit) {
  const auto [lo, hi] = local_range(unit);
  at::Tensor buffer = at::zeros({unit.shard_numel()}, at::kFloat);  // padding stays zero
  int64_t offset = 0;
  int64_t tensors = 0;
  for (const auto& p : unit.spec().params) {
    const int64_t s = std::max(lo, offset);
    const int64_t e = std::min(hi, offset + p.numel());
    if (s < e) {
      weights.read_f32(hf_llama_name(unit.spec().name, p.name), s - offset, e - s,
                       buffer.data_ptr<float>() + (s - unit.shard_offset()));
    }
    offset += p.numel();
    ++tensors;
  }
  unit.shard().copy_(buffer);
  return tensors;
}

}  // namespace

HfInitStats init_from_hf(const TrainerConfig& config, ShardedModel& model, Communicator& world) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  HfInitStats stats;
  stats.folder = config.model.init_from;
  std::string error;
  try {
    HfWeights weights(config.model.init_from);
    const auto units = model.units();
    check_tensors(weights, units, config.model);
    stats.dtypes = weights.dtypes();
    for (auto* unit : units) stats.tensors += read_unit(weights, *unit);
    stats.bytes_read = static_cast<int64_t>(weights.bytes_read());
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Agree before anyone trains: one rank's refusal stops every rank instead of hanging the others.
  const auto verdict = world.sum_over_ranks({error.empty() ? 0.0 : 1.0, static_cast<double>(stats.bytes_read)});
  if (verdict[0] > 0) {
    if (!error.empty()) throw Error(error);
    throw Error("model.init_from " + config.model.init_from + " was refused by another rank (its error names why)");
  }
  model.reshard_all();  // gathered parameters must come from the new shards
  stats.bytes_total = static_cast<int64_t>(verdict[1]);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace meshrun::trainer

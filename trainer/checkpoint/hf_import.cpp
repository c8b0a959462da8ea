#include "trainer/checkpoint/hf_import.hpp"

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

void check_shape(const HfWeights& weights, const std::string& name, const SafetensorsTensor& t,
                 const std::vector<int64_t>& expected) {
  if (t.shape == expected) return;
  throw Error("model.init_from: tensor " + name + " in " + weights.file_of(name) + " has shape " + shape_text(t.shape) +
              ", but config.json's model needs " + shape_text(expected));
}

// Every tensor the model needs, with its shape; every tensor in the folder accounted for. Returns the
// tensors present but not read (a tied model's lm_head), for the log.
std::vector<std::string> check_tensors(HfWeights& weights, const std::vector<FlatParamUnit*>& units,
                                       const ModelConfig& model) {
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
      check_shape(weights, name, *t, p.shape);
    }
  }
  std::vector<std::string> unread;
  for (const auto& name : weights.names()) {
    if (wanted.count(name) != 0 || hf_llama_ignorable(name)) continue;
    if (model.tie_embeddings && name == "lm_head.weight") {
      // Some exports of tied models carry the head too: the embedding is what a tied model uses.
      check_shape(weights, name, *weights.find(name), {model.vocab_size, model.dim});
      unread.push_back(name);
      continue;
    }
    throw Error("model.init_from: " + weights.file_of(name) + " holds tensor " + name +
                ", which has no place in a Llama model of this config (another architecture?)");
  }
  return unread;
}

}  // namespace

HfInitStats init_from_hf(const TrainerConfig& config, ShardedModel& model, Communicator& world) {
  c10::NoGradGuard no_grad;
  const auto start = Clock::now();
  HfInitStats stats;
  stats.folder = config.model.init_from;
  run_agreed(world, [&] {
    HfWeights weights(config.model.init_from);
    const auto units = model.units();
    stats.unread = check_tensors(weights, units, config.model);
    stats.dtypes = weights.dtypes();
    for (auto* unit : units) {
      const auto read = [&](const ParamSpec& p, int64_t first, int64_t count, float* out) {
        weights.read_f32(hf_llama_name(unit->spec().name, p.name), first, count, out);
      };
      fill_shard(*unit, unit->shard(), read);
      stats.tensors += static_cast<int64_t>(unit->spec().params.size());
    }
    stats.bytes_read = static_cast<int64_t>(weights.bytes_read());
  });
  model.reshard_all();  // gathered parameters must come from the new shards
  stats.bytes_total = static_cast<int64_t>(world.sum_over_ranks({static_cast<double>(stats.bytes_read)})[0]);
  stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace meshrun::trainer

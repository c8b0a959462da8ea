// TrainerConfig: the typed view of a trainer JSON config. Every key has a default and a one-line
// description (config_key_docs); unknown keys are rejected by name, `--set a.b=v` overrides any key.
// NOTE: the member initialisers below are the keys' defaults (config_defaults, --help-config and the man
// page read them); a new member needs one line in config_keys() in trainer_config.cpp, which names and documents it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/model/model_config.hpp"

namespace meshrun::trainer {

// Hybrid*: FULL_SHARD / SHARD_GRAD_OP inside a shard group (a node), replicated across groups.
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
enum class DType { kFloat32, kBFloat16, kFloat16 };
/// How ranks of one node move all-gather / reduce-scatter bytes on CPU (communicator.hpp).
enum class IntraNodeTransport { kAuto, kCrossMemoryAttach, kGloo };

struct DataConfig {
  std::string format = "text";       // text | bin | llmc | bin_u16 | bin_u32 (trainer/data/token_files.hpp)
  std::string path;                  // file, directory or glob
  std::string val_path;              // validation files; empty: the tail of path's tokens (val_fraction)
  std::vector<std::string> exclude;  // file-name patterns skipped when path is a directory
  double val_fraction = 0.05;
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch_size = 8;  // sequences per micro-batch, summed over ranks
  int64_t seq_len = 128;
  int64_t grad_accum_steps = 1;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  uint64_t seed = 1234;
  int64_t log_interval = 10;
  int64_t eval_interval = 0;  // 0 disables validation
  int64_t eval_batches = 4;
  int64_t sample_tokens = 64;
  std::string sample_prompt = "The ";
};

struct FsdpConfig {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  DType param_dtype = DType::kFloat32;
  DType reduce_dtype = DType::kFloat32;
  bool prefetch = true;
  bool native_reduce_scatter = true;     // false: all-reduce + local chunk (2x traffic), for comparison
  bool p2p_collectives = true;           // Gloo: all-gather / reduce-scatter as direct sends and receives
  int64_t shard_group_size = 0;          // hybrid: ranks per shard group; 0 = LOCAL_WORLD_SIZE
  int64_t activation_checkpointing = 0;  // 0 none, k: recompute every k-th block in backward
  bool cpu_offload = false;              // CUDA: shards, grads and AdamW state in pinned host memory
  int64_t limit_all_gathers = 1;         // unit all-gathers issued ahead of the unit computing

  bool hybrid() const {
    return strategy == ShardingStrategy::kHybridShard || strategy == ShardingStrategy::kHybridShardZero2;
  }
  /// Parameters are freed after a unit's forward and gathered again for its backward.
  bool reshard_after_forward() const {
    return strategy == ShardingStrategy::kFullShard || strategy == ShardingStrategy::kHybridShard;
  }
};

struct CheckpointConfig {
  std::string dir;                 // "" : no checkpoints
  std::string format = "sharded";  // sharded | full
  int64_t interval = 0;            // save every this many steps; 0: only at the end / on a signal
  int64_t keep_last = 0;           // keep the newest K complete checkpoints; 0 keeps all
  std::string resume;              // "" | "auto" | path of a step_<N> checkpoint
  bool on_signal = true;           // SIGUSR1 / SIGTERM: finish the step, save, exit kCheckpointedOnSignal
  bool save_final = true;          // save after the last step
  bool async = false;              // periodic saves: snapshot, then a background thread writes (async_writer.hpp)
  int64_t memory_interval = 0;     // a copy in the agent's memory every N steps (memory_checkpointer.hpp); 0: off
};

struct SystemConfig {
  std::string device = "auto";   // auto | cpu | cuda
  std::string backend = "auto";  // auto | gloo | nccl
  IntraNodeTransport intra_node = IntraNodeTransport::kAuto;
  int64_t threads = 0;       // 0: OMP_NUM_THREADS, else cores / LOCAL_WORLD_SIZE
  double peak_flops = 1e11;  // per rank, for MFU
  double timeout_s = 120.0;
};

struct OutputConfig {
  std::string dir;  // "" : no files; else metrics.jsonl, rank<R>.json, params.bin
  bool dump_params = false;
  bool progress_bar = true;
};

struct TrainerConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  FsdpConfig fsdp;
  SystemConfig system;
  OutputConfig output;
  CheckpointConfig checkpoint;
  /// The fully merged JSON (defaults + file + overrides); its dump is what ranks compare.
  nlohmann::json merged;
  /// model.init_from's config.json as read (null without init_from): checkpoints keep it, so an export
  /// keeps the keys we do not model (token ids, the original context length).
  nlohmann::json hf_config;
};

/// Every key with its default value, as nested JSON.
nlohmann::json config_defaults();
/// "section.key" -> description, for docs and --help.
std::vector<std::pair<std::string, std::string>> config_key_docs();

/// Merges `user` over the defaults, applies `overrides` ("a.b=value"; value parsed as JSON, else a
/// string), validates. `origin` names the source in error messages. Throws UsageError.
TrainerConfig make_config(const nlohmann::json& user, const std::vector<std::string>& overrides,
                          const std::string& origin);
/// Reads and parses a JSON file, then make_config. Throws UsageError naming the file.
TrainerConfig load_config(const std::string& path, const std::vector<std::string>& overrides);

/// A stable 64-bit hash of the merged config (FNV-1a over its canonical dump).
uint64_t config_hash(const TrainerConfig& config);
/// "a.b (x vs y), ..." for every leaf that differs between two merged configs; empty when equal.
std::string config_diff(const nlohmann::json& a, const nlohmann::json& b);

/// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; throws UsageError naming `key` otherwise.
DType parse_dtype(const std::string& key, const std::string& s);

std::string to_string(ShardingStrategy s);
std::string to_string(DType d);

}  // namespace meshrun::trainer

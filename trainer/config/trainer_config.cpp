#include "trainer/config/trainer_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "common/error.hpp"
#include "trainer/model/hf_llama.hpp"

namespace meshrun::trainer {
namespace {

using nlohmann::json;

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

// The value at a dotted key of the merged config, which has every key (it starts from the defaults).
const json& value_at(const json& merged, const std::string& key) {
  const json* node = &merged;
  for (const auto& part : split_dots(key)) node = &node->at(part);
  return *node;
}

// ---- Enum keys: their accepted spellings, in one list per enum.

template <typename E>
struct EnumName {
  const char* name;
  E value;
};

// Per enum: its names (the first name of a value is the one written back; later ones are aliases)
// and the noun of the "unknown <noun> '...'" error.
template <typename E>
struct EnumNames;

template <>
struct EnumNames<ShardingStrategy> {
  static constexpr const char* kNoun = "strategy";
  static constexpr EnumName<ShardingStrategy> kNames[] = {{"FULL_SHARD", ShardingStrategy::kFullShard},
                                                          {"SHARD_GRAD_OP", ShardingStrategy::kShardGradOp},
                                                          {"NO_SHARD", ShardingStrategy::kNoShard},
                                                          {"HYBRID_SHARD", ShardingStrategy::kHybridShard},
                                                          {"HYBRID_SHARD_ZERO2", ShardingStrategy::kHybridShardZero2}};
};

template <>
struct EnumNames<DType> {
  static constexpr const char* kNoun = "dtype";
  static constexpr EnumName<DType> kNames[] = {{"fp32", DType::kFloat32},  {"float32", DType::kFloat32},
                                               {"bf16", DType::kBFloat16}, {"bfloat16", DType::kBFloat16},
                                               {"fp16", DType::kFloat16},  {"float16", DType::kFloat16}};
};

template <>
struct EnumNames<RopeScaling> {
  static constexpr const char* kNoun = "value";
  static constexpr EnumName<RopeScaling> kNames[] = {{"none", RopeScaling::kNone}, {"llama3", RopeScaling::kLlama3}};
};

template <>
struct EnumNames<IntraNodeTransport> {
  static constexpr const char* kNoun = "value";
  static constexpr EnumName<IntraNodeTransport> kNames[] = {{"auto", IntraNodeTransport::kAuto},
                                                            {"cma", IntraNodeTransport::kCrossMemoryAttach},
                                                            {"gloo", IntraNodeTransport::kGloo}};
};

template <typename E>
std::string enum_name(E value) {
  for (const auto& n : EnumNames<E>::kNames) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// "A, B or C" over the written-back names (aliases are accepted but not advertised).
template <typename E>
std::string enum_choices() {
  std::vector<std::string> names;
  for (const auto& n : EnumNames<E>::kNames) {
    if (enum_name(n.value) == n.name) names.emplace_back(n.name);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

template <typename E>
E parse_enum(const std::string& key, const std::string& s) {
  for (const auto& n : EnumNames<E>::kNames) {
    if (s == n.name) return n.value;
  }
  throw UsageError("config key '" + key + "': unknown " + EnumNames<E>::kNoun + " '" + s + "' (use " +
                   enum_choices<E>() + ")");
}

// ---- One key's value: member -> JSON (defaults, docs) and JSON -> member (checked; errors name the key).

template <typename T>
json to_config_json(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return enum_name(value);
  } else {
    return value;
  }
}

// Throws UsageError naming `key` unless `v` converts to T without loss of meaning.
template <typename T>
void check_config_type(const json& v, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw UsageError("config key '" + key + "' must be true or false, got " + v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) throw UsageError("config key '" + key + "' must be an integer, got " + v.dump());
    if (std::is_unsigned_v<T> && v.get<int64_t>() < 0) {
      throw UsageError("config key '" + key + "' must be non-negative, got " + v.dump());
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) throw UsageError("config key '" + key + "' must be a number, got " + v.dump());
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) throw UsageError("config key '" + key + "' must be a string, got " + v.dump());
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "no conversion for this config member type");
    const bool strings = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
    if (!strings) throw UsageError("config key '" + key + "' must be a list of strings, got " + v.dump());
  }
}

template <typename T>
T from_config_json(const json& v, const std::string& key) {
  if constexpr (std::is_enum_v<T>) {
    return parse_enum<T>(key, from_config_json<std::string>(v, key));
  } else {
    check_config_type<T>(v, key);
    return v.get<T>();
  }
}

// ---- The key table.

// One config key: its dotted name and description, and its member of TrainerConfig as JSON both ways.
struct ConfigKey {
  const char* name;
  const char* doc;
  json (*get)(const TrainerConfig& config);
  void (*set)(TrainerConfig& config, const json& value, const std::string& key);
};

// `Section` points into TrainerConfig (&TrainerConfig::model), `Member` into that section (&ModelConfig::dim).
template <auto Section, auto Member>
ConfigKey bind_key(const char* name, const char* doc) {
  return {name, doc, [](const TrainerConfig& c) { return to_config_json((c.*Section).*Member); },
          [](TrainerConfig& c, const json& value, const std::string& key) {
            auto& member = (c.*Section).*Member;
            member = from_config_json<std::remove_reference_t<decltype(member)>>(value, key);
          }};
}

// The key's name is spelled from the section and member, so the two cannot drift apart.
#define MESHRUN_CONFIG_KEY(section, member, doc) \
  bind_key<&TrainerConfig::section, &decltype(TrainerConfig::section)::member>(#section "." #member, doc)

// The single list of keys: their order is --help-config's, their defaults are the structs' initialisers.
const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> table = {
      MESHRUN_CONFIG_KEY(model, name, "label printed in logs"),
      MESHRUN_CONFIG_KEY(model, vocab_size, "embedding rows; must exceed every token id in the data (256 for text)"),
      MESHRUN_CONFIG_KEY(model, dim, "hidden size"),
      MESHRUN_CONFIG_KEY(model, n_layers, "transformer blocks (one FSDP unit each)"),
      MESHRUN_CONFIG_KEY(model, n_heads, "attention heads; dim must be divisible by it"),
      MESHRUN_CONFIG_KEY(model, n_kv_heads, "key/value heads for grouped-query attention; 0 = n_heads"),
      MESHRUN_CONFIG_KEY(model, ffn_hidden, "SwiGLU hidden size; 0 = 8/3*dim rounded up to ffn_multiple_of"),
      MESHRUN_CONFIG_KEY(model, ffn_multiple_of, "rounding for the automatic ffn_hidden"),
      MESHRUN_CONFIG_KEY(model, max_seq_len, "longest sequence (rotary tables are built for it)"),
      MESHRUN_CONFIG_KEY(model, norm_eps, "RMSNorm epsilon"),
      MESHRUN_CONFIG_KEY(model, rope_theta, "rotary embedding base"),
      MESHRUN_CONFIG_KEY(model, rope_scaling,
                         "none | llama3 (Llama 3.1's rotary scaling: long wavelengths stretched by "
                         "rope_scaling_factor, short ones kept, a smooth blend between)"),
      MESHRUN_CONFIG_KEY(model, rope_scaling_factor,
                         "llama3 rope scaling: how much the long wavelengths are stretched"),
      MESHRUN_CONFIG_KEY(model, rope_low_freq_factor,
                         "llama3 rope scaling: wavelengths above original/low_freq_factor stretch"),
      MESHRUN_CONFIG_KEY(model, rope_high_freq_factor,
                         "llama3 rope scaling: wavelengths below original/high_freq_factor stay"),
      MESHRUN_CONFIG_KEY(model, rope_original_max_seq_len,
                         "llama3 rope scaling: the context length the model was trained at"),
      MESHRUN_CONFIG_KEY(model, tie_embeddings, "output head shares the token embedding matrix"),
      MESHRUN_CONFIG_KEY(model, init_std,
                         "std of the normal init of matrices (output projections scaled by 1/sqrt(2*n_layers))"),
      MESHRUN_CONFIG_KEY(model, init_from,
                         "a Hugging Face Llama folder (config.json + model.safetensors or "
                         "model.safetensors.index.json; fp32, bf16 or fp16): the model's shape comes from its "
                         "config.json and training starts from its weights (a checkpoint to resume takes "
                         "precedence); empty = random init"),
      MESHRUN_CONFIG_KEY(data, format,
                         "text (UTF-8 files, byte-level tokens) | bin (an llm.c shard when the file has its header, "
                         "else flat uint16 ids as nanoGPT writes) | llmc (llm.c shards: 256 x int32 header, magic "
                         "20240520) | bin_u16 | bin_u32 (flat token-id files); token files are memory-mapped"),
      MESHRUN_CONFIG_KEY(data, path,
                         "a file, a directory (its regular files) or a glob such as /data/fineweb_train_*.bin; "
                         "several files are read one after another in name order"),
      MESHRUN_CONFIG_KEY(data, val_path,
                         "validation files (file, directory or glob, never also in data.path); empty: the last "
                         "data.val_fraction of data.path's tokens"),
      MESHRUN_CONFIG_KEY(data, exclude,
                         "file-name glob patterns skipped when data.path (or data.val_path) is a directory or a glob"),
      MESHRUN_CONFIG_KEY(data, val_fraction, "share of tokens at the end held out for validation"),
      MESHRUN_CONFIG_KEY(train, steps,
                         "optimizer steps; 0: initialise (model.init_from) or resume, save checkpoint step 0 if "
                         "checkpoint.dir is set, stop"),
      MESHRUN_CONFIG_KEY(train, global_batch_size,
                         "sequences per micro-batch summed over all ranks (divisible by world size)"),
      MESHRUN_CONFIG_KEY(train, seq_len, "tokens per sequence (<= model.max_seq_len)"),
      MESHRUN_CONFIG_KEY(train, grad_accum_steps,
                         "micro-batches per optimizer step; gradients are reduced only on the last"),
      MESHRUN_CONFIG_KEY(train, lr, "peak learning rate"),
      MESHRUN_CONFIG_KEY(train, min_lr, "learning rate at the end of the cosine decay (<= train.lr)"),
      MESHRUN_CONFIG_KEY(train, warmup_steps, "linear warm-up steps"),
      MESHRUN_CONFIG_KEY(train, weight_decay, "AdamW decoupled weight decay (matrices only, not norms)"),
      MESHRUN_CONFIG_KEY(train, beta1, "AdamW beta1"),
      MESHRUN_CONFIG_KEY(train, beta2, "AdamW beta2"),
      MESHRUN_CONFIG_KEY(train, eps, "AdamW epsilon"),
      MESHRUN_CONFIG_KEY(train, grad_clip, "clip the global gradient norm to this; 0 disables"),
      MESHRUN_CONFIG_KEY(train, seed, "seed for init, batch order and sampling (same batches for any world size)"),
      MESHRUN_CONFIG_KEY(train, log_interval, "rank 0 logs a line every this many steps"),
      MESHRUN_CONFIG_KEY(train, eval_interval, "validation loss every this many steps; 0 disables"),
      MESHRUN_CONFIG_KEY(train, eval_batches, "validation micro-batches per evaluation"),
      MESHRUN_CONFIG_KEY(train, sample_tokens, "tokens sampled from the model at the end; 0 disables"),
      MESHRUN_CONFIG_KEY(train, sample_prompt, "prompt for the final sample (text data only)"),
      MESHRUN_CONFIG_KEY(fsdp, strategy, "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | HYBRID_SHARD_ZERO2"),
      MESHRUN_CONFIG_KEY(fsdp, param_dtype, "compute dtype of gathered parameters: fp32 | bf16 | fp16"),
      MESHRUN_CONFIG_KEY(fsdp, reduce_dtype, "dtype of gradient reduction: fp32 | bf16 | fp16"),
      MESHRUN_CONFIG_KEY(fsdp, prefetch, "issue the next unit's all-gather before the current unit computes"),
      MESHRUN_CONFIG_KEY(fsdp, native_reduce_scatter, "false: reduce-scatter as all-reduce + local chunk (2x traffic)"),
      MESHRUN_CONFIG_KEY(fsdp, p2p_collectives,
                         "Gloo: all-gather and reduce-scatter as direct sends/receives into the destination buffers "
                         "(no staging copy; the reduce-scatter moves 1x the data, Gloo's own 2x)"),
      MESHRUN_CONFIG_KEY(fsdp, shard_group_size,
                         "HYBRID_*: ranks per shard group (replicated across groups); 0 = LOCAL_WORLD_SIZE"),
      MESHRUN_CONFIG_KEY(fsdp, activation_checkpointing,
                         "recompute block activations in backward: 0 none, 1 every block, k every k-th block"),
      MESHRUN_CONFIG_KEY(fsdp, cpu_offload,
                         "CUDA: keep shards, gradients and AdamW state in pinned host memory; no-op on CPU"),
      MESHRUN_CONFIG_KEY(fsdp, limit_all_gathers,
                         "at most this many unit all-gathers in flight ahead of the computing unit (>= 1)"),
      MESHRUN_CONFIG_KEY(checkpoint, dir, "directory of step_<N> checkpoints; empty = no checkpoints"),
      MESHRUN_CONFIG_KEY(checkpoint, format,
                         "sharded (every rank writes its shards) | full (rank 0 writes one gathered file)"),
      MESHRUN_CONFIG_KEY(checkpoint, interval,
                         "save every this many steps; 0 = only after the last step and on a signal"),
      MESHRUN_CONFIG_KEY(checkpoint, keep_last, "keep only the newest K complete checkpoints; 0 keeps all"),
      MESHRUN_CONFIG_KEY(checkpoint, resume,
                         "\"\" (fresh start) | auto (newest complete checkpoint in checkpoint.dir, if any) | path of "
                         "a step_<N> folder"),
      MESHRUN_CONFIG_KEY(checkpoint, on_signal,
                         "SIGUSR1/SIGTERM: finish the step, checkpoint, exit with code 75 (needs checkpoint.dir)"),
      MESHRUN_CONFIG_KEY(checkpoint, save_final, "save a checkpoint after the last step (needs checkpoint.dir)"),
      MESHRUN_CONFIG_KEY(checkpoint, async,
                         "periodic saves copy the shards to host buffers and a background thread writes them while "
                         "training goes on (sharded format only); final and signal-triggered saves stay synchronous"),
      MESHRUN_CONFIG_KEY(checkpoint, memory_interval,
                         "under meshrun: every N steps a copy of each rank's shards, AdamW state and step goes to its "
                         "node's agent, off the training thread; a restarted job restores the newest step every rank "
                         "holds in memory before looking at checkpoint.dir (0 = off)"),
      MESHRUN_CONFIG_KEY(system, device, "auto | cpu | cuda (cuda uses device LOCAL_RANK)"),
      MESHRUN_CONFIG_KEY(system, backend,
                         "auto | gloo | nccl (auto: nccl on cuda, gloo on cpu; gloo on cuda copies through host "
                         "memory and lets ranks share a GPU)"),
      MESHRUN_CONFIG_KEY(system, intra_node,
                         "auto | cma | gloo: how the Gloo backend's all-gathers and reduce-scatters move bytes "
                         "between ranks under one launcher. cma: each rank copies straight out of its peers' memory "
                         "(process_vm_readv, one copy, no sockets), and a group on one node that cannot stops with "
                         "the reason; gloo: loopback TCP; auto: cma where it works, else gloo. Groups that span "
                         "nodes always use Gloo"),
      MESHRUN_CONFIG_KEY(system, threads, "intra-op threads; 0 = OMP_NUM_THREADS or cores / LOCAL_WORLD_SIZE"),
      MESHRUN_CONFIG_KEY(system, peak_flops, "peak FLOP/s of one rank's device, for MFU"),
      MESHRUN_CONFIG_KEY(system, timeout_s, "store and collective timeout (start-up check included)"),
      MESHRUN_CONFIG_KEY(output, dir, "directory for metrics.jsonl, rank<R>.json and params.bin; empty = none"),
      MESHRUN_CONFIG_KEY(output, dump_params, "rank 0 writes the final fp32 parameters to output.dir/params.bin"),
      MESHRUN_CONFIG_KEY(output, progress_bar, "show a progress bar when stdout is a terminal"),
  };
  return table;
}

#undef MESHRUN_CONFIG_KEY

// Merges user over defaults; every user key must already exist in defaults.
void merge_checked(json& base, const json& user, const std::string& prefix, const std::string& origin) {
  if (!user.is_object()) {
    throw UsageError(origin + ": '" + (prefix.empty() ? "<root>" : prefix) + "' must be a JSON object");
  }
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (!base.contains(it.key())) {
      std::string known;
      for (auto k = base.begin(); k != base.end(); ++k) known += (known.empty() ? "" : ", ") + k.key();
      throw UsageError(origin + ": unknown config key '" + path + "' (known keys here: " + known + ")");
    }
    json& slot = base[it.key()];
    if (slot.is_object()) {
      merge_checked(slot, it.value(), path, origin);
    } else {
      slot = it.value();
    }
  }
}

// Where the user set model.<key>: nullptr when they did not (it holds its default).
const char* where_set(const json& user, const std::vector<std::string>& overrides, const std::string& key,
                      const std::string& origin) {
  const std::string prefix = "model." + key + "=";
  if (std::any_of(overrides.begin(), overrides.end(), [&](const std::string& o) { return o.rfind(prefix, 0) == 0; }))
    return "--set";
  if (user.is_object() && user.contains("model") && user["model"].is_object() && user["model"].contains(key))
    return origin.c_str();
  return nullptr;
}

// What a user's value stands for once the model has config.json's shape: 0 means "automatic" for
// n_kv_heads (= n_heads) and ffn_hidden (the 8/3 rule).
json resolved(const std::string& key, const json& value, const json& model) {
  if (key == "n_kv_heads" && value == 0) return model["n_heads"];
  if (key == "ffn_hidden" && value == 0 && model["dim"].is_number_integer() &&
      model["ffn_multiple_of"].is_number_integer()) {
    ModelConfig m;
    m.dim = model["dim"].get<int64_t>();
    m.ffn_multiple_of = std::max<int64_t>(1, model["ffn_multiple_of"].get<int64_t>());
    return m.ffn_dim();
  }
  return value;
}

// model.name from the folder: Hugging Face's cache keeps models as models--<org>--<name>/snapshots/<sha>.
std::string name_of_folder(const std::string& folder) {
  std::filesystem::path path = std::filesystem::path(folder).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "dir/"
  const std::filesystem::path repo = path.parent_path().parent_path().filename();
  const std::string cached = repo.string();
  if (path.parent_path().filename() == "snapshots" && cached.rfind("models--", 0) == 0) {
    const std::string name = cached.substr(8);  // "<org>--<name>"
    const auto sep = name.find("--");
    return sep == std::string::npos ? name : name.substr(0, sep) + "/" + name.substr(sep + 2);
  }
  return path.filename().string();
}

// model.init_from: the model keys come from the folder's config.json, which is returned. Keys the user set
// too must agree (a silently ignored rope_theta would train a different model); all disagreements are
// named at once. max_seq_len is the user's to choose (it sizes the rotary tables, not a weight), init_std
// means nothing when every weight is loaded, and name defaults to the folder's.
json apply_init_from(json& merged, const json& user, const std::vector<std::string>& overrides,
                     const std::string& origin) {
  json& model = merged["model"];
  if (!model["init_from"].is_string() || model["init_from"].get<std::string>().empty()) return nullptr;
  const std::string folder = model["init_from"].get<std::string>();
  const std::string hf_path = (std::filesystem::path(folder) / "config.json").string();
  json hf = read_hf_config(folder);
  const json keys = model_keys_from_hf_config(hf, hf_path);
  const json user_model = model;
  for (auto it = keys.begin(); it != keys.end(); ++it) model[it.key()] = it.value();
  if (where_set(user, overrides, "max_seq_len", origin) != nullptr) model["max_seq_len"] = user_model["max_seq_len"];
  std::string conflicts;
  std::string fixes;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    const char* where = where_set(user, overrides, it.key(), origin);
    if (where == nullptr || it.key() == "max_seq_len" || it.key() == "init_std") continue;
    const json& mine = user_model[it.key()];
    if (resolved(it.key(), mine, model) == it.value()) continue;
    if (!conflicts.empty()) {
      conflicts += ", ";
      fixes += " ";
    }
    conflicts += "model." + it.key() + "=" + mine.dump() + " (" + where + "; config.json: " + it.value().dump() + ")";
    fixes += "--set model." + it.key() + "=" + it.value().dump();
  }
  if (!conflicts.empty()) {
    throw UsageError("model.init_from: " + hf_path + " disagrees with " + conflicts +
                     ". With model.init_from the model's shape comes from config.json: drop these keys (from the "
                     "config file or --set), or set them to config.json's values: " +
                     fixes);
  }
  if (where_set(user, overrides, "name", origin) == nullptr) model["name"] = name_of_folder(folder);
  return hf;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError("invalid config: " + message);
}

void validate(const TrainerConfig& c) {
  const auto& m = c.model;
  require(m.vocab_size > 0 && m.dim > 0 && m.n_layers > 0 && m.n_heads > 0,
          "model.vocab_size, model.dim, model.n_layers and model.n_heads must be positive");
  require(m.dim % m.n_heads == 0, "model.dim (" + std::to_string(m.dim) + ") must be divisible by model.n_heads (" +
                                      std::to_string(m.n_heads) + ")");
  require(m.head_dim() % 2 == 0, "model.dim / model.n_heads must be even (rotary embeddings rotate pairs)");
  require(m.n_heads % m.kv_heads() == 0, "model.n_heads must be divisible by model.n_kv_heads");
  require(m.ffn_multiple_of > 0, "model.ffn_multiple_of must be positive");
  require(m.rope_theta > 0, "model.rope_theta must be positive");
  require(m.rope_scaling == RopeScaling::kNone ||
              (m.rope_scaling_factor > 0 && m.rope_original_max_seq_len > 0 &&
               m.rope_high_freq_factor > m.rope_low_freq_factor && m.rope_low_freq_factor > 0),
          "model.rope_scaling=llama3 needs rope_scaling_factor > 0, rope_original_max_seq_len > 0 and "
          "rope_high_freq_factor > rope_low_freq_factor > 0");
  const auto& t = c.train;
  require(t.steps >= 0, "train.steps must be >= 0 (0: load or initialise, save checkpoint step 0, stop)");
  require(t.global_batch_size > 0, "train.global_batch_size must be positive");
  require(t.seq_len > 0 && t.seq_len <= m.max_seq_len,
          "train.seq_len must be in [1, model.max_seq_len=" + std::to_string(m.max_seq_len) + "]");
  require(t.grad_accum_steps > 0, "train.grad_accum_steps must be positive");
  require(t.log_interval > 0, "train.log_interval must be positive");
  require(t.eval_interval >= 0 && t.eval_batches > 0, "train.eval_interval >= 0 and train.eval_batches > 0");
  require(t.warmup_steps >= 0 && t.lr > 0 && t.min_lr >= 0, "train.lr > 0, train.min_lr >= 0, train.warmup_steps >= 0");
  require(t.min_lr <= t.lr, "train.min_lr (" + json(t.min_lr).dump() + ") must not exceed train.lr (" +
                                json(t.lr).dump() + "): the cosine decay would raise the rate; set train.min_lr too");
  require(t.grad_clip >= 0, "train.grad_clip must be >= 0");
  require(c.data.format == "text" || c.data.format == "bin" || c.data.format == "llmc" || c.data.format == "bin_u16" ||
              c.data.format == "bin_u32",
          "data.format must be text, bin, llmc, bin_u16 or bin_u32, got '" + c.data.format + "'");
  require(!c.data.path.empty(), "data.path is empty: point it at a text file/directory or a .bin token file");
  require(c.data.val_fraction >= 0 && c.data.val_fraction < 0.5, "data.val_fraction must be in [0, 0.5)");
  require(c.data.format != "text" || m.vocab_size >= 256, "data.format=text needs model.vocab_size >= 256");
  require(c.system.device == "auto" || c.system.device == "cpu" || c.system.device == "cuda",
          "system.device must be auto, cpu or cuda");
  require(c.system.backend == "auto" || c.system.backend == "gloo" || c.system.backend == "nccl",
          "system.backend must be auto, gloo or nccl");
  require(c.system.threads >= 0 && c.system.peak_flops > 0 && c.system.timeout_s > 0,
          "system.threads >= 0, system.peak_flops > 0, system.timeout_s > 0");
  require(!c.output.dump_params || !c.output.dir.empty(), "output.dump_params needs output.dir");
  require(c.fsdp.shard_group_size >= 0, "fsdp.shard_group_size must be >= 0");
  require(c.fsdp.activation_checkpointing >= 0, "fsdp.activation_checkpointing must be >= 0 (0 = none)");
  require(c.fsdp.limit_all_gathers >= 1, "fsdp.limit_all_gathers must be >= 1");
  require(c.checkpoint.format == "sharded" || c.checkpoint.format == "full",
          "checkpoint.format must be sharded or full, got '" + c.checkpoint.format + "'");
  require(c.checkpoint.interval >= 0 && c.checkpoint.keep_last >= 0 && c.checkpoint.memory_interval >= 0,
          "checkpoint.interval, checkpoint.keep_last and checkpoint.memory_interval must be >= 0");
  require(c.checkpoint.resume != "auto" || !c.checkpoint.dir.empty(), "checkpoint.resume=auto needs checkpoint.dir");
  // A full checkpoint is gathered through rank 0 with collectives, which must stay on the training thread (and
  // rank 0 would hold the whole state in its snapshot).
  require(!c.checkpoint.async || c.checkpoint.format == "sharded",
          "checkpoint.async needs checkpoint.format=sharded (a full checkpoint is gathered with collectives on the "
          "training thread)");
}

void set_dotted(json& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw UsageError("--set '" + assignment + "': expected KEY=VALUE, e.g. --set train.lr=1e-3");
  }
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;  // bare words are strings: --set fsdp.strategy=NO_SHARD
  json* node = &root;
  const auto parts = split_dots(key);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!node->is_object() || !node->contains(parts[i])) {
      throw UsageError("--set: unknown config key '" + key + "' (see docs/trainer.md#configs or --help-config)");
    }
    node = &(*node)[parts[i]];
  }
  if (node->is_object()) throw UsageError("--set: '" + key + "' is a section, not a key");
  // Keep numbers numeric when the default is a float but the user typed an integer, and vice versa.
  *node = value;
}

}  // namespace

DType parse_dtype(const std::string& key, const std::string& s) { return parse_enum<DType>(key, s); }

json config_defaults() {
  const TrainerConfig defaults;
  json root = json::object();
  for (const auto& key : config_keys()) {
    json* node = &root;
    for (const auto& part : split_dots(key.name)) node = &(*node)[part];
    *node = key.get(defaults);
  }
  return root;
}

std::vector<std::pair<std::string, std::string>> config_key_docs() {
  const TrainerConfig defaults;
  std::vector<std::pair<std::string, std::string>> docs;
  for (const auto& key : config_keys())
    docs.emplace_back(key.name, std::string(key.doc) + " (default " + key.get(defaults).dump() + ")");
  return docs;
}

TrainerConfig make_config(const json& user, const std::vector<std::string>& overrides, const std::string& origin) {
  json merged = config_defaults();
  merge_checked(merged, user, "", origin);
  for (const auto& o : overrides) set_dotted(merged, o);
  json hf_config = apply_init_from(merged, user, overrides, origin);

  TrainerConfig c;
  for (const auto& key : config_keys()) key.set(c, value_at(merged, key.name), key.name);
  c.merged = std::move(merged);
  c.hf_config = std::move(hf_config);
  validate(c);
  return c;
}

TrainerConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot open config file '" + path + "' (pass --config configs/NAME.json)");
  json user = json::parse(in, nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
  if (user.is_discarded()) throw UsageError("config file '" + path + "' is not valid JSON");
  return make_config(user, overrides, path);
}

uint64_t config_hash(const TrainerConfig& config) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : config.merged.dump()) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string config_diff(const json& a, const json& b) {
  const json flat_a = a.flatten();
  const json flat_b = b.flatten();
  std::string out;
  auto add = [&](const std::string& pointer, const std::string& va, const std::string& vb) {
    std::string key = pointer.substr(1);
    for (auto& ch : key) {
      if (ch == '/') ch = '.';
    }
    out += (out.empty() ? "" : ", ") + key + " (" + va + " vs " + vb + ")";
  };
  for (auto it = flat_a.begin(); it != flat_a.end(); ++it) {
    if (!flat_b.contains(it.key())) {
      add(it.key(), it.value().dump(), "<missing>");
    } else if (flat_b[it.key()] != it.value()) {
      add(it.key(), it.value().dump(), flat_b[it.key()].dump());
    }
  }
  for (auto it = flat_b.begin(); it != flat_b.end(); ++it) {
    if (!flat_a.contains(it.key())) add(it.key(), "<missing>", it.value().dump());
  }
  return out;
}

std::string to_string(ShardingStrategy s) { return enum_name(s); }

std::string to_string(DType d) { return enum_name(d); }

}  // namespace meshrun::trainer

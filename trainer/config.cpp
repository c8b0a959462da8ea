#include "trainer/config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "trainer/model/hf_llama.hpp"

namespace meshrun::trainer {
namespace {

using nlohmann::json;

struct KeyDoc {
  const char* key;
  json default_value;
  const char* doc;
};

// The single list of keys: defaults, documentation and the set of accepted names all come from it.
const std::vector<KeyDoc>& key_table() {
  static const std::vector<KeyDoc> table = {
      {"model.name", "custom", "label printed in logs"},
      {"model.vocab_size", 256, "embedding rows; must exceed every token id in the data (256 for text)"},
      {"model.dim", 128, "hidden size"},
      {"model.n_layers", 4, "transformer blocks (one FSDP unit each)"},
      {"model.n_heads", 4, "attention heads; dim must be divisible by it"},
      {"model.n_kv_heads", 0, "key/value heads for grouped-query attention; 0 = n_heads"},
      {"model.ffn_hidden", 0, "SwiGLU hidden size; 0 = 8/3*dim rounded up to ffn_multiple_of"},
      {"model.ffn_multiple_of", 32, "rounding for the automatic ffn_hidden"},
      {"model.max_seq_len", 256, "longest sequence (rotary tables are built for it)"},
      {"model.norm_eps", 1e-5, "RMSNorm epsilon"},
      {"model.rope_theta", 10000.0, "rotary embedding base"},
      {"model.rope_scaling", "none",
       "none | llama3 (Llama 3.1's rotary scaling: long wavelengths stretched by rope_scaling_factor, short ones kept, "
       "a smooth blend between)"},
      {"model.rope_scaling_factor", 8.0, "llama3 rope scaling: how much the long wavelengths are stretched"},
      {"model.rope_low_freq_factor", 1.0, "llama3 rope scaling: wavelengths above original/low_freq_factor stretch"},
      {"model.rope_high_freq_factor", 4.0, "llama3 rope scaling: wavelengths below original/high_freq_factor stay"},
      {"model.rope_original_max_seq_len", 8192, "llama3 rope scaling: the context length the model was trained at"},
      {"model.tie_embeddings", true, "output head shares the token embedding matrix"},
      {"model.init_std", 0.02, "std of the normal init of matrices (output projections scaled by 1/sqrt(2*n_layers))"},
      {"model.init_from", "",
       "a Hugging Face Llama folder (config.json + model.safetensors or model.safetensors.index.json; fp32, bf16 or "
       "fp16): the model's shape comes from its config.json and training starts from its weights (a checkpoint to "
       "resume takes precedence); empty = random init"},
      {"data.format", "text",
       "text (UTF-8 files, byte-level tokens) | bin (an llm.c shard when the file has its header, else flat uint16 "
       "ids as nanoGPT writes) | llmc (llm.c shards: 256 x int32 header, magic 20240520) | bin_u16 | bin_u32 "
       "(flat token-id files); token files are memory-mapped"},
      {"data.path", "",
       "a file, a directory (its regular files) or a glob such as /data/fineweb_train_*.bin; several files are "
       "read one after another in name order"},
      {"data.val_path", "",
       "validation files (file, directory or glob, never also in data.path); empty: the last data.val_fraction "
       "of data.path's tokens"},
      {"data.exclude", json::array(),
       "file-name glob patterns skipped when data.path (or data.val_path) is a directory or a glob"},
      {"data.val_fraction", 0.05, "share of tokens at the end held out for validation"},
      {"train.steps", 100,
       "optimizer steps; 0: initialise (model.init_from) or resume, save checkpoint step 0 if checkpoint.dir is set, "
       "stop"},
      {"train.global_batch_size", 8, "sequences per micro-batch summed over all ranks (divisible by world size)"},
      {"train.seq_len", 128, "tokens per sequence (<= model.max_seq_len)"},
      {"train.grad_accum_steps", 1, "micro-batches per optimizer step; gradients are reduced only on the last"},
      {"train.lr", 3e-3, "peak learning rate"},
      {"train.min_lr", 3e-4, "learning rate at the end of the cosine decay (<= train.lr)"},
      {"train.warmup_steps", 10, "linear warm-up steps"},
      {"train.weight_decay", 0.1, "AdamW decoupled weight decay (matrices only, not norms)"},
      {"train.beta1", 0.9, "AdamW beta1"},
      {"train.beta2", 0.95, "AdamW beta2"},
      {"train.eps", 1e-8, "AdamW epsilon"},
      {"train.grad_clip", 1.0, "clip the global gradient norm to this; 0 disables"},
      {"train.seed", 1234, "seed for init, batch order and sampling (same batches for any world size)"},
      {"train.log_interval", 10, "rank 0 logs a line every this many steps"},
      {"train.eval_interval", 0, "validation loss every this many steps; 0 disables"},
      {"train.eval_batches", 4, "validation micro-batches per evaluation"},
      {"train.sample_tokens", 64, "tokens sampled from the model at the end; 0 disables"},
      {"train.sample_prompt", "The ", "prompt for the final sample (text data only)"},
      {"fsdp.strategy", "FULL_SHARD", "FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD | HYBRID_SHARD_ZERO2"},
      {"fsdp.param_dtype", "fp32", "compute dtype of gathered parameters: fp32 | bf16 | fp16"},
      {"fsdp.reduce_dtype", "fp32", "dtype of gradient reduction: fp32 | bf16 | fp16"},
      {"fsdp.prefetch", true, "issue the next unit's all-gather before the current unit computes"},
      {"fsdp.native_reduce_scatter", true, "false: reduce-scatter as all-reduce + local chunk (2x traffic)"},
      {"fsdp.p2p_collectives", true,
       "Gloo: all-gather and reduce-scatter as direct sends/receives into the destination buffers (no staging copy; "
       "the reduce-scatter moves 1x the data, Gloo's own 2x)"},
      {"fsdp.shard_group_size", 0, "HYBRID_*: ranks per shard group (replicated across groups); 0 = LOCAL_WORLD_SIZE"},
      {"fsdp.activation_checkpointing", 0,
       "recompute block activations in backward: 0 none, 1 every block, k every k-th block"},
      {"fsdp.cpu_offload", false, "CUDA: keep shards, gradients and AdamW state in pinned host memory; no-op on CPU"},
      {"fsdp.limit_all_gathers", 1, "at most this many unit all-gathers in flight ahead of the computing unit (>= 1)"},
      {"checkpoint.dir", "", "directory of step_<N> checkpoints; empty = no checkpoints"},
      {"checkpoint.format", "sharded",
       "sharded (every rank writes its shards) | full (rank 0 writes one gathered file)"},
      {"checkpoint.interval", 0, "save every this many steps; 0 = only after the last step and on a signal"},
      {"checkpoint.keep_last", 0, "keep only the newest K complete checkpoints; 0 keeps all"},
      {"checkpoint.resume", "",
       "\"\" (fresh start) | auto (newest complete checkpoint in checkpoint.dir, if any) | path of a step_<N> folder"},
      {"checkpoint.on_signal", true,
       "SIGUSR1/SIGTERM: finish the step, checkpoint, exit with code 75 (needs checkpoint.dir)"},
      {"checkpoint.save_final", true, "save a checkpoint after the last step (needs checkpoint.dir)"},
      {"checkpoint.async", false,
       "periodic saves copy the shards to host buffers and a background thread writes them while training goes "
       "on (sharded format only); final and signal-triggered saves stay synchronous"},
      {"system.device", "auto", "auto | cpu | cuda (cuda uses device LOCAL_RANK)"},
      {"system.backend", "auto",
       "auto | gloo | nccl (auto: nccl on cuda, gloo on cpu; gloo on cuda copies through host memory and lets ranks "
       "share a GPU)"},
      {"system.intra_node", "auto",
       "auto | cma | gloo: how the Gloo backend's all-gathers and reduce-scatters move bytes between ranks under one "
       "launcher. cma: each rank copies straight out of its peers' memory (process_vm_readv, one copy, no sockets), "
       "and a group on one node that cannot stops with the reason; gloo: loopback TCP; auto: cma where it works, "
       "else gloo. Groups that span nodes always use Gloo"},
      {"system.threads", 0, "intra-op threads; 0 = OMP_NUM_THREADS or cores / LOCAL_WORLD_SIZE"},
      {"system.peak_flops", 1e11, "peak FLOP/s of one rank's device, for MFU"},
      {"system.timeout_s", 120.0, "store and collective timeout (start-up check included)"},
      {"output.dir", "", "directory for metrics.jsonl, rank<R>.json and params.bin; empty = none"},
      {"output.dump_params", false, "rank 0 writes the final fp32 parameters to output.dir/params.bin"},
      {"output.progress_bar", true, "show a progress bar when stdout is a terminal"},
  };
  return table;
}

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

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

template <typename T>
T get_as(const json& merged, const std::string& key) {
  const json* node = &merged;
  for (const auto& part : split_dots(key)) node = &node->at(part);
  const json& v = *node;
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
    if (!v.is_array()) throw UsageError("config key '" + key + "' must be a list of strings, got " + v.dump());
    for (const auto& e : v) {
      if (!e.is_string()) throw UsageError("config key '" + key + "' must be a list of strings, got " + v.dump());
    }
  }
  return v.get<T>();
}

RopeScaling parse_rope_scaling(const std::string& s) {
  if (s == "none") return RopeScaling::None;
  if (s == "llama3") return RopeScaling::Llama3;
  throw UsageError("config key 'model.rope_scaling': unknown value '" + s + "' (use none or llama3)");
}

IntraNodeTransport parse_intra_node(const std::string& s) {
  if (s == "auto") return IntraNodeTransport::Auto;
  if (s == "cma") return IntraNodeTransport::CrossMemoryAttach;
  if (s == "gloo") return IntraNodeTransport::Gloo;
  throw UsageError("config key 'system.intra_node': unknown value '" + s + "' (use auto, cma or gloo)");
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
  require(m.rope_scaling == RopeScaling::None ||
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
  require(c.checkpoint.interval >= 0 && c.checkpoint.keep_last >= 0,
          "checkpoint.interval and checkpoint.keep_last must be >= 0");
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
      throw UsageError("--set: unknown config key '" + key + "' (see the README trainer section or --help-config)");
    }
    node = &(*node)[parts[i]];
  }
  if (node->is_object()) throw UsageError("--set: '" + key + "' is a section, not a key");
  // Keep numbers numeric when the default is a float but the user typed an integer, and vice versa.
  *node = value;
}

}  // namespace

int64_t ModelConfig::ffn_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  const int64_t raw = (8 * dim) / 3;
  return ((raw + ffn_multiple_of - 1) / ffn_multiple_of) * ffn_multiple_of;
}

DType parse_dtype(const std::string& key, const std::string& s) {
  if (s == "fp32" || s == "float32") return DType::Float32;
  if (s == "bf16" || s == "bfloat16") return DType::BFloat16;
  if (s == "fp16" || s == "float16") return DType::Float16;
  throw UsageError("config key '" + key + "': unknown dtype '" + s + "' (use fp32, bf16 or fp16)");
}

json config_defaults() {
  json root = json::object();
  for (const auto& k : key_table()) {
    json* node = &root;
    for (const auto& part : split_dots(k.key)) node = &(*node)[part];
    *node = k.default_value;
  }
  return root;
}

std::vector<std::pair<std::string, std::string>> config_key_docs() {
  std::vector<std::pair<std::string, std::string>> docs;
  for (const auto& k : key_table())
    docs.emplace_back(k.key, std::string(k.doc) + " (default " + k.default_value.dump() + ")");
  return docs;
}

TrainerConfig make_config(const json& user, const std::vector<std::string>& overrides, const std::string& origin) {
  json merged = config_defaults();
  merge_checked(merged, user, "", origin);
  for (const auto& o : overrides) set_dotted(merged, o);
  json hf_config = apply_init_from(merged, user, overrides, origin);

  TrainerConfig c;
  auto& m = c.model;
  m.name = get_as<std::string>(merged, "model.name");
  m.vocab_size = get_as<int64_t>(merged, "model.vocab_size");
  m.dim = get_as<int64_t>(merged, "model.dim");
  m.n_layers = get_as<int64_t>(merged, "model.n_layers");
  m.n_heads = get_as<int64_t>(merged, "model.n_heads");
  m.n_kv_heads = get_as<int64_t>(merged, "model.n_kv_heads");
  m.ffn_hidden = get_as<int64_t>(merged, "model.ffn_hidden");
  m.ffn_multiple_of = get_as<int64_t>(merged, "model.ffn_multiple_of");
  m.max_seq_len = get_as<int64_t>(merged, "model.max_seq_len");
  m.norm_eps = get_as<double>(merged, "model.norm_eps");
  m.rope_theta = get_as<double>(merged, "model.rope_theta");
  m.rope_scaling = parse_rope_scaling(get_as<std::string>(merged, "model.rope_scaling"));
  m.rope_scaling_factor = get_as<double>(merged, "model.rope_scaling_factor");
  m.rope_low_freq_factor = get_as<double>(merged, "model.rope_low_freq_factor");
  m.rope_high_freq_factor = get_as<double>(merged, "model.rope_high_freq_factor");
  m.rope_original_max_seq_len = get_as<int64_t>(merged, "model.rope_original_max_seq_len");
  m.tie_embeddings = get_as<bool>(merged, "model.tie_embeddings");
  m.init_std = get_as<double>(merged, "model.init_std");
  m.init_from = get_as<std::string>(merged, "model.init_from");

  c.data.format = get_as<std::string>(merged, "data.format");
  c.data.path = get_as<std::string>(merged, "data.path");
  c.data.exclude = get_as<std::vector<std::string>>(merged, "data.exclude");
  c.data.val_path = get_as<std::string>(merged, "data.val_path");
  c.data.val_fraction = get_as<double>(merged, "data.val_fraction");

  auto& t = c.train;
  t.steps = get_as<int64_t>(merged, "train.steps");
  t.global_batch_size = get_as<int64_t>(merged, "train.global_batch_size");
  t.seq_len = get_as<int64_t>(merged, "train.seq_len");
  t.grad_accum_steps = get_as<int64_t>(merged, "train.grad_accum_steps");
  t.lr = get_as<double>(merged, "train.lr");
  t.min_lr = get_as<double>(merged, "train.min_lr");
  t.warmup_steps = get_as<int64_t>(merged, "train.warmup_steps");
  t.weight_decay = get_as<double>(merged, "train.weight_decay");
  t.beta1 = get_as<double>(merged, "train.beta1");
  t.beta2 = get_as<double>(merged, "train.beta2");
  t.eps = get_as<double>(merged, "train.eps");
  t.grad_clip = get_as<double>(merged, "train.grad_clip");
  t.seed = get_as<uint64_t>(merged, "train.seed");
  t.log_interval = get_as<int64_t>(merged, "train.log_interval");
  t.eval_interval = get_as<int64_t>(merged, "train.eval_interval");
  t.eval_batches = get_as<int64_t>(merged, "train.eval_batches");
  t.sample_tokens = get_as<int64_t>(merged, "train.sample_tokens");
  t.sample_prompt = get_as<std::string>(merged, "train.sample_prompt");

  const auto strategy = get_as<std::string>(merged, "fsdp.strategy");
  if (strategy == "FULL_SHARD") {
    c.fsdp.strategy = ShardingStrategy::FullShard;
  } else if (strategy == "SHARD_GRAD_OP") {
    c.fsdp.strategy = ShardingStrategy::ShardGradOp;
  } else if (strategy == "NO_SHARD") {
    c.fsdp.strategy = ShardingStrategy::NoShard;
  } else if (strategy == "HYBRID_SHARD") {
    c.fsdp.strategy = ShardingStrategy::HybridShard;
  } else if (strategy == "HYBRID_SHARD_ZERO2") {
    c.fsdp.strategy = ShardingStrategy::HybridShardZero2;
  } else {
    throw UsageError("config key 'fsdp.strategy': unknown strategy '" + strategy +
                     "' (use FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2)");
  }
  c.fsdp.param_dtype = parse_dtype("fsdp.param_dtype", get_as<std::string>(merged, "fsdp.param_dtype"));
  c.fsdp.reduce_dtype = parse_dtype("fsdp.reduce_dtype", get_as<std::string>(merged, "fsdp.reduce_dtype"));
  c.fsdp.prefetch = get_as<bool>(merged, "fsdp.prefetch");
  c.fsdp.native_reduce_scatter = get_as<bool>(merged, "fsdp.native_reduce_scatter");
  c.fsdp.p2p_collectives = get_as<bool>(merged, "fsdp.p2p_collectives");
  c.fsdp.shard_group_size = get_as<int64_t>(merged, "fsdp.shard_group_size");
  c.fsdp.activation_checkpointing = get_as<int64_t>(merged, "fsdp.activation_checkpointing");
  c.fsdp.cpu_offload = get_as<bool>(merged, "fsdp.cpu_offload");
  c.fsdp.limit_all_gathers = get_as<int64_t>(merged, "fsdp.limit_all_gathers");

  c.checkpoint.dir = get_as<std::string>(merged, "checkpoint.dir");
  c.checkpoint.format = get_as<std::string>(merged, "checkpoint.format");
  c.checkpoint.interval = get_as<int64_t>(merged, "checkpoint.interval");
  c.checkpoint.keep_last = get_as<int64_t>(merged, "checkpoint.keep_last");
  c.checkpoint.resume = get_as<std::string>(merged, "checkpoint.resume");
  c.checkpoint.on_signal = get_as<bool>(merged, "checkpoint.on_signal");
  c.checkpoint.save_final = get_as<bool>(merged, "checkpoint.save_final");
  c.checkpoint.async = get_as<bool>(merged, "checkpoint.async");

  c.system.device = get_as<std::string>(merged, "system.device");
  c.system.backend = get_as<std::string>(merged, "system.backend");
  c.system.intra_node = parse_intra_node(get_as<std::string>(merged, "system.intra_node"));
  c.system.threads = get_as<int64_t>(merged, "system.threads");
  c.system.peak_flops = get_as<double>(merged, "system.peak_flops");
  c.system.timeout_s = get_as<double>(merged, "system.timeout_s");

  c.output.dir = get_as<std::string>(merged, "output.dir");
  c.output.dump_params = get_as<bool>(merged, "output.dump_params");
  c.output.progress_bar = get_as<bool>(merged, "output.progress_bar");

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

std::string to_string(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::FullShard: return "FULL_SHARD";
    case ShardingStrategy::ShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::NoShard: return "NO_SHARD";
    case ShardingStrategy::HybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::HybridShardZero2: return "HYBRID_SHARD_ZERO2";
  }
  return "?";
}

std::string to_string(DType d) {
  switch (d) {
    case DType::Float32: return "fp32";
    case DType::BFloat16: return "bf16";
    case DType::Float16: return "fp16";
  }
  return "?";
}

}  // namespace meshrun::trainer

#include "trainer/model/hf_llama.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <type_traits>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A key of config.json: `fallback` (LlamaConfig's default) when absent or null; a type mismatch is refused.
template <typename T>
T hf_value(const json& hf, const std::string& key, const std::string& origin, const std::optional<T>& fallback) {
  const auto it = hf.find(key);
  if (it == hf.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw UsageError(origin + " has no '" + key + "': a Hugging Face LlamaConfig needs it");
  }
  const bool ok = std::is_same_v<T, bool>          ? it->is_boolean()
                  : std::is_same_v<T, std::string> ? it->is_string()
                  : std::is_integral_v<T>          ? it->is_number_integer()
                                                   : it->is_number();
  if (!ok) throw UsageError(origin + ": '" + key + "' has the wrong type (" + it->dump() + ")");
  return it->get<T>();
}

// transformers 5 keeps rope_theta and the scaling in rope_parameters; 4 has rope_theta at the top and an
// optional rope_scaling object ("type" in old files, "rope_type" in newer).
json rope_object(const json& hf) {
  if (hf.contains("rope_parameters") && hf["rope_parameters"].is_object()) return hf["rope_parameters"];
  json rope = hf.contains("rope_scaling") && hf["rope_scaling"].is_object() ? hf["rope_scaling"] : json::object();
  if (hf.contains("rope_theta")) rope["rope_theta"] = hf["rope_theta"];
  return rope;
}

void add_rope_keys(json& keys, const json& hf, const std::string& origin) {
  const json rope = rope_object(hf);
  const std::string where = origin + " (rope parameters)";
  keys["rope_theta"] = hf_value<double>(rope, "rope_theta", where, 10000.0);
  std::string type = hf_value<std::string>(rope, "rope_type", where, std::string("default"));
  if (!rope.contains("rope_type")) type = hf_value<std::string>(rope, "type", where, std::string("default"));
  if (type == "default") {
    keys["rope_scaling"] = "none";
    return;
  }
  if (type != "llama3") {
    throw UsageError(origin + ": rope type '" + type +
                     "' is not supported (meshrun-trainer implements default and llama3 rotary embeddings)");
  }
  keys["rope_scaling"] = "llama3";
  keys["rope_scaling_factor"] = hf_value<double>(rope, "factor", where, std::nullopt);
  keys["rope_low_freq_factor"] = hf_value<double>(rope, "low_freq_factor", where, std::nullopt);
  keys["rope_high_freq_factor"] = hf_value<double>(rope, "high_freq_factor", where, std::nullopt);
  keys["rope_original_max_seq_len"] = hf_value<int64_t>(rope, "original_max_position_embeddings", where, std::nullopt);
}

void refuse_unless(bool ok, const std::string& origin, const std::string& what) {
  if (!ok) throw UsageError(origin + ": " + what + " (meshrun-trainer trains the plain Llama architecture)");
}

}  // namespace

std::string hf_llama_name(const std::string& unit, const std::string& param) {
  if (unit == "root") {
    if (param == "tok_embeddings") return "model.embed_tokens.weight";
    if (param == "norm") return "model.norm.weight";
    if (param == "output") return "lm_head.weight";
  } else if (unit.rfind("block", 0) == 0) {
    static const std::map<std::string, std::string> block = {{"attention_norm", "input_layernorm"},
                                                             {"wq", "self_attn.q_proj"},
                                                             {"wk", "self_attn.k_proj"},
                                                             {"wv", "self_attn.v_proj"},
                                                             {"wo", "self_attn.o_proj"},
                                                             {"ffn_norm", "post_attention_layernorm"},
                                                             {"w1", "mlp.gate_proj"},
                                                             {"w3", "mlp.up_proj"},
                                                             {"w2", "mlp.down_proj"}};
    const auto it = block.find(param);
    if (it != block.end()) return "model.layers." + unit.substr(5) + "." + it->second + ".weight";
  }
  throw Error("no Hugging Face name for " + unit + "." + param);
}

bool hf_llama_ignorable(const std::string& tensor_name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return tensor_name.size() >= suffix.size() &&
         tensor_name.compare(tensor_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json hf_llama_config(const ModelConfig& m, const std::string& torch_dtype) {
  json rope = {{"rope_theta", m.rope_theta}, {"rope_type", "default"}};
  if (m.rope_scaling == RopeScaling::kLlama3) {
    rope = {{"rope_theta", m.rope_theta},
            {"rope_type", "llama3"},
            {"factor", m.rope_scaling_factor},
            {"low_freq_factor", m.rope_low_freq_factor},
            {"high_freq_factor", m.rope_high_freq_factor},
            {"original_max_position_embeddings", m.rope_original_max_seq_len}};
  }
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"vocab_size", m.vocab_size},
                 {"hidden_size", m.dim},
                 {"intermediate_size", m.ffn_dim()},
                 {"num_hidden_layers", m.n_layers},
                 {"num_attention_heads", m.n_heads},
                 {"num_key_value_heads", m.kv_heads()},
                 {"head_dim", m.head_dim()},
                 {"max_position_embeddings", m.max_seq_len},
                 {"rms_norm_eps", m.norm_eps},
                 // Both spellings: transformers 5 reads rope_parameters, 4 reads rope_theta (+ rope_scaling).
                 {"rope_parameters", rope},
                 {"rope_theta", m.rope_theta},
                 {"tie_word_embeddings", m.tie_embeddings},
                 {"hidden_act", "silu"},
                 {"attention_bias", false},
                 {"mlp_bias", false},
                 {"initializer_range", m.init_std},
                 {"torch_dtype", torch_dtype},
                 {"dtype", torch_dtype}};
  if (m.rope_scaling == RopeScaling::kLlama3) config["rope_scaling"] = rope;
  return config;
}

json read_hf_config(const std::string& folder) {
  const fs::path path = fs::path(folder) / "config.json";
  std::ifstream in(path);
  if (!in) {
    throw UsageError("model.init_from: " + path.string() +
                     " cannot be read; point model.init_from at a Hugging Face model folder (config.json and "
                     "model.safetensors or model.safetensors.index.json)");
  }
  json hf = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (hf.is_discarded() || !hf.is_object()) throw UsageError(path.string() + " is not a JSON object");
  return hf;
}

json model_keys_from_hf_config(const json& hf, const std::string& origin) {
  const std::string model_type = hf_value<std::string>(hf, "model_type", origin, std::string("llama"));
  refuse_unless(model_type == "llama", origin, "model_type is '" + model_type + "', not 'llama'");
  refuse_unless(hf_value<std::string>(hf, "hidden_act", origin, std::string("silu")) == "silu", origin,
                "hidden_act is not silu");
  refuse_unless(!hf_value<bool>(hf, "attention_bias", origin, false), origin, "attention_bias is true");
  refuse_unless(!hf_value<bool>(hf, "mlp_bias", origin, false), origin, "mlp_bias is true");

  json keys = json::object();
  keys["vocab_size"] = hf_value<int64_t>(hf, "vocab_size", origin, std::nullopt);
  keys["dim"] = hf_value<int64_t>(hf, "hidden_size", origin, std::nullopt);
  keys["n_layers"] = hf_value<int64_t>(hf, "num_hidden_layers", origin, std::nullopt);
  const auto heads = hf_value<int64_t>(hf, "num_attention_heads", origin, std::nullopt);
  keys["n_heads"] = heads;
  keys["n_kv_heads"] = hf_value<int64_t>(hf, "num_key_value_heads", origin, heads);
  keys["ffn_hidden"] = hf_value<int64_t>(hf, "intermediate_size", origin, std::nullopt);
  keys["max_seq_len"] = hf_value<int64_t>(hf, "max_position_embeddings", origin, int64_t{2048});
  keys["norm_eps"] = hf_value<double>(hf, "rms_norm_eps", origin, 1e-6);
  keys["tie_embeddings"] = hf_value<bool>(hf, "tie_word_embeddings", origin, false);
  keys["init_std"] = hf_value<double>(hf, "initializer_range", origin, 0.02);
  add_rope_keys(keys, hf, origin);
  if (heads > 0) {
    const int64_t dim = keys["dim"].get<int64_t>();
    const auto head_dim = hf_value<int64_t>(hf, "head_dim", origin, dim / heads);
    refuse_unless(head_dim * heads == dim, origin,
                  "head_dim " + std::to_string(head_dim) + " x " + std::to_string(heads) +
                      " heads is not hidden_size " + std::to_string(dim));
  }
  return keys;
}

}  // namespace meshrun::trainer

#include "trainer/checkpoint/safetensors_export.hpp"

#include <cstdio>
#include <filesystem>
#include <map>

#include "common/error.hpp"
#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/model/model.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

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

json hf_llama_config(const ModelConfig& m) {
  // Our rotary layout is rotate-half over [first half | second half] of each head, which is what HF's
  // LlamaRotaryEmbedding computes, so q/k weights need no permutation.
  return {{"architectures", {"LlamaForCausalLM"}},
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
          {"rope_theta", m.rope_theta},
          {"tie_word_embeddings", m.tie_embeddings},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"initializer_range", m.init_std},
          {"torch_dtype", "float32"}};
}

void export_safetensors(const std::string& checkpoint, const std::string& out) {
  std::string path = checkpoint;
  if (!fs::exists(fs::path(path) / "metadata.json")) {
    const auto latest = latest_checkpoint(path);
    if (!latest)
      throw UsageError(checkpoint +
                       " is neither a complete checkpoint (no metadata.json) nor a folder of step_<N> checkpoints");
    path = *latest;
  }
  CheckpointReader reader(path);
  // The model section of the config that saved it rebuilds the exact parameter list.
  const TrainerConfig saved = make_config(reader.metadata().at("config"), {}, path + "/metadata.json");
  const auto specs = build_unit_specs(saved.model);

  struct Entry {
    std::string source;
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel;
  };
  std::vector<Entry> entries;
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {"source", "meshrun-trainer"},
                            {"step", std::to_string(reader.metadata()["step"].get<int64_t>())}};
  int64_t offset = 0;
  for (const auto& unit : specs) {
    for (const auto& p : unit.params) {
      Entry e{"model." + unit.name + "." + p.name, hf_llama_name(unit.name, p.name), p.shape, p.numel()};
      const int64_t bytes = e.numel * static_cast<int64_t>(sizeof(float));
      header[e.name] = {{"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      entries.push_back(std::move(e));
    }
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);

  if (const fs::path folder = fs::path(out).parent_path(); !folder.empty()) {
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) throw UsageError("cannot create the folder '" + folder.string() + "' for --out: " + ec.message());
  }
  AtomicFile f(out);
  f.write(len, sizeof(len));
  f.write(text.data(), text.size());
  std::vector<float> buffer;
  for (const auto& e : entries) {
    buffer.resize(static_cast<size_t>(e.numel));
    reader.read(e.source, 0, e.numel, buffer.data());  // CRCs checked; x86 floats are little-endian already
    f.write(buffer.data(), buffer.size() * sizeof(float));
  }
  f.commit();
  const fs::path config_path = fs::path(out).parent_path() / "config.json";
  write_file_atomic(config_path.string(), hf_llama_config(saved.model).dump(2) + "\n");
  std::printf("exported %s (step %lld, %zu tensors, %.1f MB) and %s\n", out.c_str(),
              static_cast<long long>(reader.metadata()["step"].get<int64_t>()), entries.size(),
              static_cast<double>(offset) / 1e6, config_path.string().c_str());
}

}  // namespace meshrun::trainer

// Export of a checkpoint's model weights as safetensors (8-byte little-endian header length, JSON header,
// raw little-endian data; written here, no library), under the names of a Llama-style Hugging Face
// checkpoint, plus the matching config.json. Works from any checkpoint, sharded or full, any world size.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainer/config.hpp"

namespace meshrun::trainer {

/// Our parameter name ("block3.wq", "root.tok_embeddings") -> the Hugging Face Llama name
/// ("model.layers.3.self_attn.q_proj.weight", "model.embed_tokens.weight").
std::string hf_llama_name(const std::string& unit, const std::string& param);

/// A Hugging Face LlamaConfig for our model config.
nlohmann::json hf_llama_config(const ModelConfig& model);

/// `checkpoint`: a step_<N> folder, or a checkpoint.dir (its newest complete checkpoint). Writes `out` and
/// config.json in out's folder. Throws meshrun::Error naming the file when the checkpoint is unusable.
void export_safetensors(const std::string& checkpoint, const std::string& out);

}  // namespace meshrun::trainer

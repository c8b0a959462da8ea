// The Hugging Face Llama vocabulary, both ways: tensor names ("model.layers.3.self_attn.q_proj.weight")
// and config.json (LlamaConfig) <-> our ModelConfig. Torch-free: the config loader uses it to take a
// model's shape from a Hugging Face folder (model.init_from) before any rank builds the model.
//
// Our rotary layout is rotate-half over [first half | second half] of each head, which is what Hugging
// Face's LlamaRotaryEmbedding computes, so q/k weights carry over without a permutation.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "trainer/model/model_config.hpp"

namespace meshrun::trainer {

/// Our parameter name ("block3.wq", "root.tok_embeddings") -> the Hugging Face Llama name
/// ("model.layers.3.self_attn.q_proj.weight", "model.embed_tokens.weight").
std::string hf_llama_name(const std::string& unit, const std::string& param);

/// True for tensors a Hugging Face Llama folder may hold that carry no weights of ours (the rotary
/// inv_freq buffers old exports saved).
bool hf_llama_ignorable(const std::string& tensor_name);

/// A Hugging Face LlamaConfig for our model config. `torch_dtype`: "float32" or "bfloat16", the dtype of
/// the weights written next to it.
nlohmann::json hf_llama_config(const ModelConfig& model, const std::string& torch_dtype);

/// config.json of a Hugging Face folder, parsed. Throws UsageError naming the folder when it is missing
/// or not a JSON object.
nlohmann::json read_hf_config(const std::string& folder);

/// Our model.* keys (vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_hidden, max_seq_len, norm_eps,
/// rope_theta, rope_scaling..., tie_embeddings, init_std) for a LlamaConfig, with LlamaConfig's own defaults for
/// absent optional keys (transformers 4 and 5 spellings: rope_theta or rope_parameters). Throws
/// UsageError naming `origin` and the key for anything this model cannot represent (biases, another
/// activation, a head_dim other than hidden_size / heads, rope scaling other than llama3).
nlohmann::json model_keys_from_hf_config(const nlohmann::json& hf, const std::string& origin);

}  // namespace meshrun::trainer

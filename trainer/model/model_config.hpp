// ModelConfig: the shape of the Llama-style model (trainer/model/model.hpp), the `model.*` keys of a trainer
// config (trainer/config/trainer_config.hpp reads them, with their defaults below and their docs in config_keys()).
// Beside the model, so the model and its Hugging Face names need nothing from the config's loader.
#pragma once

#include <cstdint>
#include <string>

namespace meshrun::trainer {

// Llama3: Llama 3.1's frequency-dependent stretch of the rotary wavelengths (Hugging Face rope_type "llama3").
enum class RopeScaling { kNone, kLlama3 };

struct ModelConfig {
  std::string name = "custom";  // label in logs; model.init_from's folder name unless set
  int64_t vocab_size = 256;
  int64_t dim = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0: same as n_heads
  int64_t ffn_hidden = 0;  // 0: the Llama rule (2/3 * 4 * dim rounded up to ffn_multiple_of)
  int64_t ffn_multiple_of = 32;
  int64_t max_seq_len = 256;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::kNone;
  double rope_scaling_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_seq_len = 8192;
  bool tie_embeddings = true;
  double init_std = 0.02;
  std::string init_from;  // a Hugging Face Llama folder: its config.json sets the keys above, its weights the init

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return dim / n_heads; }
  int64_t ffn_dim() const;
};

}  // namespace meshrun::trainer

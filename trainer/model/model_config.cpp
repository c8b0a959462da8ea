#include "trainer/model/model_config.hpp"

namespace meshrun::trainer {

// The Llama rule: 2/3 of 4 * dim, rounded up to a multiple of ffn_multiple_of.
int64_t ModelConfig::ffn_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  const int64_t raw = (8 * dim) / 3;
  return ((raw + ffn_multiple_of - 1) / ffn_multiple_of) * ffn_multiple_of;
}

}  // namespace meshrun::trainer

// Export of a checkpoint's model weights as safetensors (trainer/checkpoint/safetensors_file.hpp), fp32 or
// bf16, under the names of a Llama-style Hugging Face checkpoint (trainer/model/hf_llama.hpp), plus the
// matching config.json. Works from any checkpoint, sharded or full, any world size.
#pragma once

#include <string>

#include "trainer/config/trainer_config.hpp"

namespace meshrun::trainer {

/// `checkpoint`: a step_<N> folder, or a checkpoint.dir (its newest complete checkpoint). Writes `out` and
/// config.json in out's folder (the folder is created): for a run started from model.init_from, that
/// folder's config.json with our keys written over it (token ids, the original context length kept), and
/// its tokenizer and generation files copied when the folder still exists. `dtype`: Float32 or BFloat16
/// (rounded to nearest even, as torch rounds). Throws meshrun::Error naming the file when the checkpoint
/// is unusable, UsageError for Float16.
void export_safetensors(const std::string& checkpoint, const std::string& out, DType dtype);

}  // namespace meshrun::trainer

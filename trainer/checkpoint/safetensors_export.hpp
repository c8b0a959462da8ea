// Export of a checkpoint's model weights as safetensors (trainer/checkpoint/safetensors_file.hpp), fp32 or
// bf16, under the names of a Llama-style Hugging Face checkpoint (trainer/model/hf_llama.hpp), plus the
// matching config.json. Works from any checkpoint, sharded or full, any world size.
#pragma once

#include <string>

namespace meshrun::trainer {

enum class ExportDType { Float32, BFloat16 };

/// "fp32"/"float32" or "bf16"/"bfloat16"; throws UsageError otherwise.
ExportDType parse_export_dtype(const std::string& text);

/// `checkpoint`: a step_<N> folder, or a checkpoint.dir (its newest complete checkpoint). Writes `out` and
/// config.json in out's folder (the folder is created). bf16 rounds to nearest even, as torch does.
/// Throws meshrun::Error naming the file when the checkpoint is unusable.
void export_safetensors(const std::string& checkpoint, const std::string& out, ExportDType dtype);

}  // namespace meshrun::trainer

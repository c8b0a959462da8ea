#include "trainer/checkpoint/safetensors_export.hpp"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "trainer/checkpoint/atomic_file.hpp"
#include "trainer/checkpoint/checkpoint.hpp"
#include "trainer/checkpoint/safetensors_file.hpp"
#include "trainer/config/trainer_config.hpp"
#include "trainer/model/hf_llama.hpp"
#include "trainer/model/model.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::string source;  // the checkpoint's tensor name
  std::string name;    // the Hugging Face name
  int64_t numel;
};

// The model config that saved the checkpoint. Its merged config already holds the shape that
// model.init_from resolved, so the Hugging Face folder is not needed (nor read) again.
TrainerConfig saved_config(const CheckpointReader& reader, const std::string& path) {
  nlohmann::json saved = reader.metadata().at("config");
  if (saved.contains("model") && saved["model"].contains("init_from")) saved["model"]["init_from"] = "";
  return make_config(saved, {}, path + "/metadata.json");
}

void write_tensor(AtomicFile& f, const std::vector<float>& values, DType dtype) {
  if (dtype == DType::kFloat32) {
    f.write(values.data(), values.size() * sizeof(float));  // x86 floats are little-endian already
    return;
  }
  std::vector<uint16_t> half(values.size());
  for (size_t i = 0; i < values.size(); ++i) half[i] = bf16_from_f32(values[i]);
  f.write(half.data(), half.size() * sizeof(uint16_t));
}

// Our config.json keys over model.init_from's config.json (kept in the checkpoint), so what we do not model
// survives: token ids, the original context length (we may have trained on a shorter one), the rest.
nlohmann::json merged_hf_config(const CheckpointReader& reader, const nlohmann::json& ours) {
  const nlohmann::json& meta = reader.metadata();
  if (!meta.contains("hf_config") || !meta["hf_config"].is_object()) return ours;
  nlohmann::json config = meta["hf_config"];
  for (auto it = ours.begin(); it != ours.end(); ++it) {
    if (it.key() == "max_position_embeddings" && config.contains(it.key())) continue;
    config[it.key()] = it.value();
  }
  return config;
}

// A fine-tuned model is only usable with its tokenizer: the files next to the original weights come along.
void copy_tokenizer_files(const std::string& source, const fs::path& folder) {
  if (source.empty() || !fs::is_directory(source)) return;
  static const char* const kFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                       "tokenizer.model", "generation_config.json"};
  for (const char* name : kFiles) {
    const fs::path from = fs::path(source) / name;
    if (!fs::exists(from)) continue;
    std::error_code ec;
    fs::copy_file(from, folder / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error("cannot copy " + from.string() + " to " + folder.string() + ": " + ec.message());
    std::printf("copied %s from model.init_from %s\n", name, source.c_str());
  }
}

}  // namespace

void export_safetensors(const std::string& checkpoint, const std::string& out, DType dtype) {
  if (dtype == DType::kFloat16) throw UsageError("export --dtype: fp16 is not written; use fp32 or bf16");
  std::string path = checkpoint;
  if (!fs::exists(fs::path(path) / "metadata.json")) {
    const auto latest = latest_checkpoint(path);
    if (!latest)
      throw UsageError(checkpoint +
                       " is neither a complete checkpoint (no metadata.json) nor a folder of step_<N> checkpoints");
    path = *latest;
  }
  CheckpointReader reader(path);
  const TrainerConfig saved = saved_config(reader, path);
  const bool bf16 = dtype == DType::kBFloat16;
  const int64_t element = bf16 ? 2 : 4;

  std::vector<Entry> entries;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  const auto step = reader.metadata().at("step").get<int64_t>();
  header["__metadata__"] = {{"format", "pt"}, {"source", "meshrun-trainer"}, {"step", std::to_string(step)}};
  int64_t offset = 0;
  for (const auto& unit : build_unit_specs(saved.model)) {
    for (const auto& p : unit.params) {
      Entry e{"model." + unit.name + "." + p.name, hf_llama_name(unit.name, p.name), p.numel()};
      const int64_t bytes = e.numel * element;
      header[e.name] = {
          {"dtype", bf16 ? "BF16" : "F32"}, {"shape", p.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      entries.push_back(std::move(e));
    }
  }

  if (const fs::path folder = fs::path(out).parent_path(); !folder.empty()) {
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) throw UsageError("cannot create the folder '" + folder.string() + "' for --out: " + ec.message());
  }
  AtomicFile f(out);
  const std::string preamble = safetensors_preamble(header);
  f.write(preamble.data(), preamble.size());
  std::vector<float> buffer;
  for (const auto& e : entries) {
    buffer.resize(static_cast<size_t>(e.numel));
    reader.read(e.source, 0, e.numel, buffer.data());  // CRCs checked
    write_tensor(f, buffer, dtype);
  }
  f.commit();
  const fs::path folder = fs::path(out).parent_path();
  const nlohmann::json ours = hf_llama_config(saved.model, bf16 ? "bfloat16" : "float32");
  write_file_atomic((folder / "config.json").string(), merged_hf_config(reader, ours).dump(2) + "\n");
  copy_tokenizer_files(reader.metadata()["config"]["model"].value("init_from", std::string()), folder);
  std::printf("exported %s (step %lld, %zu tensors, %s, %.1f MB) and %s\n", out.c_str(), static_cast<long long>(step),
              entries.size(), bf16 ? "bf16" : "fp32", static_cast<double>(offset) / 1e6,
              (folder / "config.json").string().c_str());
}

}  // namespace meshrun::trainer

#include "trainer/checkpoint/hf_weights.hpp"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  std::ifstream in(index_path);
  const json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(index_path.string() + " is not a safetensors index (no \"weight_map\" object)");
  std::map<std::string, std::string> map;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const std::string file = it.value().is_string() ? it.value().get<std::string>() : "";
    // A shard is a file next to the index: nothing else may be named (no "../", no absolute path).
    if (file.empty() || file == "." || file == ".." || fs::path(file).filename().string() != file)
      throw Error(index_path.string() + ": weight_map names '" + it.value().dump() + "' for " + it.key() +
                  "; expected a file name in the same folder");
    map.emplace(it.key(), file);
  }
  return map;
}

}  // namespace

HfWeights::HfWeights(std::string folder) : folder_(std::move(folder)) {
  const fs::path dir(folder_);
  // transformers' own order: the single file when there is one, else the index.
  if (!fs::exists(dir / kSingleFile) && fs::exists(dir / kIndexFile)) {
    file_of_ = read_weight_map(dir / kIndexFile);
    return;
  }
  if (!fs::exists(dir / kSingleFile)) {
    const bool torch_bin = fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
    throw UsageError("model.init_from: " + folder_ + " has neither " + kSingleFile + " nor " + kIndexFile +
                     (torch_bin ? "; it has PyTorch .bin weights, which are not read (pickle): convert them with "
                                  "transformers, model.save_pretrained(folder) writes safetensors"
                                : ""));
  }
  for (const auto& [name, tensor] : open(kSingleFile).tensors()) file_of_.emplace(name, kSingleFile);
}

SafetensorsFile& HfWeights::open(const std::string& file) {
  auto& slot = files_[file];
  if (!slot) slot = std::make_unique<SafetensorsFile>((fs::path(folder_) / file).string());
  return *slot;
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

const SafetensorsTensor* HfWeights::find(const std::string& name) {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) return nullptr;
  const SafetensorsTensor* t = open(it->second).find(name);
  if (t == nullptr) {
    throw Error(folder_ + "/" + kIndexFile + " places " + name + " in " + it->second + ", which has no such tensor");
  }
  return t;
}

std::string HfWeights::file_of(const std::string& name) const {
  const auto it = file_of_.find(name);
  return (fs::path(folder_) / (it == file_of_.end() ? kSingleFile : it->second)).string();
}

void HfWeights::read_f32(const std::string& name, int64_t first, int64_t count, float* dst) {
  if (find(name) == nullptr) throw Error(folder_ + " has no tensor " + name);
  open(file_of_.at(name)).read_f32(name, first, count, dst);
}

uint64_t HfWeights::bytes_read() const {
  uint64_t n = 0;
  for (const auto& [file, f] : files_) n += f ? f->bytes_read() : 0;
  return n;
}

std::string HfWeights::dtypes() {
  std::set<std::string> seen;
  for (const auto& [name, file] : file_of_) {
    if (const SafetensorsTensor* t = find(name)) seen.insert(t->dtype_name);
  }
  std::string out;
  for (const auto& d : seen) out += (out.empty() ? "" : " + ") + d;
  return out;
}

}  // namespace meshrun::trainer

#include "trainer/data/dataset.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "common/mapped_file.hpp"

namespace meshrun::trainer {
namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::vector<std::string> list_files(const DataConfig& config) {
  const fs::path path(config.path);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path.string()};
  if (!fs::is_directory(path, ec)) {
    throw UsageError("data.path '" + config.path +
                     "' does not exist (for the quickstart corpus: "
                     "apt-get install fortunes fortunes-min, or run scripts/setup.sh)");
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (!entry.is_regular_file() || entry.is_symlink()) continue;
    const std::string name = entry.path().filename().string();
    const bool excluded = std::any_of(config.exclude.begin(), config.exclude.end(), [&](const std::string& pattern) {
      return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    });
    if (!excluded) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError("data.path '" + config.path + "' holds no files (after data.exclude)");
  return files;
}

}  // namespace

TokenDataset::TokenDataset(const DataConfig& config) : files_(list_files(config)) {
  if (config.format == "text") {
    for (const auto& file : files_) {
      std::ifstream in(file, std::ios::binary);
      if (!in) throw UsageError("cannot read data file '" + file + "'");
      bytes_.insert(bytes_.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    size_ = static_cast<int64_t>(bytes_.size());
  } else {
    if (files_.size() != 1) throw UsageError("data.format=" + config.format + " needs data.path to be one .bin file");
    width_ = config.format == "bin_u16" ? 2 : 4;
    mapped_ = MappedFile(files_[0]);
    if (mapped_.size() % static_cast<size_t>(width_) != 0) {
      throw UsageError("'" + files_[0] + "' has " + std::to_string(mapped_.size()) + " bytes, not a multiple of " +
                       std::to_string(width_) + ": is data.format right?");
    }
    size_ = static_cast<int64_t>(mapped_.size() / static_cast<size_t>(width_));
  }
  train_size_ = size_ - static_cast<int64_t>(static_cast<double>(size_) * config.val_fraction);
  if (size_ < 2) throw UsageError("data.path '" + config.path + "' holds fewer than 2 tokens");
}

uint32_t TokenDataset::token(Split split, int64_t i) const {
  const int64_t at = split == Split::Train ? i : train_size_ + i;
  if (mapped_.data() == nullptr) return bytes_[static_cast<size_t>(at)];
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, mapped_.data() + at * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, mapped_.data() + at * 4, 4);
  return v;
}

uint32_t TokenDataset::max_token_sampled() const {
  uint32_t m = 0;
  const int64_t n = std::min<int64_t>(size_, 1 << 20);
  for (int64_t i = 0; i < n; ++i) m = std::max(m, token(Split::Train, i < train_size_ ? i : 0));
  return m;
}

MicroBatch sample_micro_batch(const TokenDataset& data, Split split, uint64_t seed, int64_t step_index,
                              int64_t first_seq, int64_t global_batch, int64_t seq_len, int rank, int world_size) {
  if (global_batch % world_size != 0) {
    throw UsageError("train.global_batch_size (" + std::to_string(global_batch) +
                     ") must be divisible by the world size (" + std::to_string(world_size) + ")");
  }
  const int64_t span = data.split_size(split) - seq_len - 1;
  if (span <= 0) {
    throw UsageError("the " + std::string(split == Split::Train ? "training" : "validation") + " split has " +
                     std::to_string(data.split_size(split)) + " tokens, fewer than train.seq_len+1 (" +
                     std::to_string(seq_len + 1) + "): lower seq_len or change data.val_fraction");
  }
  MicroBatch mb;
  mb.batch = global_batch / world_size;
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(mb.batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  const uint64_t stream = splitmix64(seed ^ (split == Split::Train ? 0x7261696EULL : 0x76616CULL));
  for (int64_t local = 0; local < mb.batch; ++local) {
    const int64_t seq = first_seq + rank * mb.batch + local;  // position in the step's batch
    const uint64_t h =
        splitmix64(stream ^ splitmix64(static_cast<uint64_t>(step_index) * 1000003ULL + static_cast<uint64_t>(seq)));
    const int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(span + 1));
    for (int64_t j = 0; j < seq_len; ++j) {
      mb.inputs[static_cast<size_t>(local * seq_len + j)] = data.token(split, start + j);
      mb.targets[static_cast<size_t>(local * seq_len + j)] = data.token(split, start + j + 1);
    }
  }
  return mb;
}

std::vector<int64_t> encode_bytes(const std::string& text) {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string decode_bytes(const std::vector<int64_t>& tokens) {
  std::string out;
  for (auto t : tokens) out.push_back(static_cast<char>(t & 0xFF));
  return out;
}

}  // namespace meshrun::trainer

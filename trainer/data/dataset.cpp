#include "trainer/data/dataset.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

TokenDataset::TokenDataset(const DataConfig& config)
    : files_(resolve_data_files(config.path, config.exclude, "data.path")) {
  if (config.format == "text") {
    if (!config.val_path.empty()) throw UsageError("data.val_path needs token files (data.format other than text)");
    for (const auto& file : files_) {
      std::ifstream in(file, std::ios::binary);
      if (!in) throw UsageError("cannot read data file '" + file + "'");
      bytes_.insert(bytes_.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    size_ = static_cast<int64_t>(bytes_.size());
  } else {
    tokens_ = TokenSequence(files_, config.format);
    size_ = tokens_.size();
  }
  if (size_ < 2) throw UsageError("data.path '" + config.path + "' holds fewer than 2 tokens");
  split(config);
}

// The validation split: data.val_path's own files (never a training file too), else the training
// files' last val_fraction of tokens, which the training windows never reach.
void TokenDataset::split(const DataConfig& config) {
  if (config.val_path.empty()) {
    train_size_ = size_ - static_cast<int64_t>(static_cast<double>(size_) * config.val_fraction);
    val_size_ = size_ - train_size_;
    return;
  }
  const auto val_files = resolve_data_files(config.val_path, config.exclude, "data.val_path");
  for (const auto& f : val_files) {
    const auto same = [&](const std::string& t) { return fs::equivalent(t, f); };
    if (std::any_of(files_.begin(), files_.end(), same)) {
      throw UsageError("'" + f + "' is in both data.path and data.val_path: the splits must not overlap " +
                       "(narrow data.path's glob, e.g. *_train_*.bin, or set data.exclude)");
    }
  }
  val_tokens_ = TokenSequence(val_files, config.format);
  train_size_ = size_;
  val_size_ = val_tokens_.size();
}

uint32_t TokenDataset::token(Split split, int64_t i) const {
  if (split == Split::kVal && !val_tokens_.empty()) return val_tokens_.at(i);
  const int64_t at = split == Split::kTrain ? i : train_size_ + i;
  if (tokens_.empty()) return bytes_[static_cast<size_t>(at)];
  return tokens_.at(at);
}

uint32_t TokenDataset::max_token_sampled() const {
  uint32_t m = 0;
  const int64_t n = std::min<int64_t>(size_, 1 << 20);
  for (int64_t i = 0; i < n; ++i) m = std::max(m, token(Split::kTrain, i < train_size_ ? i : 0));
  return m;
}

MicroBatch sample_micro_batch(const TokenDataset& data, Split split, uint64_t seed, int64_t step_index,
                              int64_t first_seq, int64_t global_batch, int64_t seq_len, int rank, int world_size) {
  if (global_batch % world_size != 0) {
    throw UsageError("train.global_batch_size (" + std::to_string(global_batch) +
                     ") must be divisible by the world size (" + std::to_string(world_size) + ")");
  }
  const int64_t span = data.split_size(split) - seq_len - 1;  // window starts 0..span
  if (span < 0) {
    throw UsageError("the " + std::string(split == Split::kTrain ? "training" : "validation") + " split has " +
                     std::to_string(data.split_size(split)) + " tokens, fewer than train.seq_len+1 (" +
                     std::to_string(seq_len + 1) + "): lower seq_len or change data.val_fraction");
  }
  MicroBatch mb;
  mb.batch = global_batch / world_size;
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(mb.batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  const uint64_t stream = splitmix64(seed ^ (split == Split::kTrain ? 0x7261696EULL : 0x76616CULL));
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

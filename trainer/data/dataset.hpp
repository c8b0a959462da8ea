// TokenDataset: the training corpus as one flat sequence of token ids, and the validation split: a
// held-out tail, or files of its own (data.val_path). Sources: token files (token_files.hpp: nanoGPT's
// flat uint16/uint32 ids, llm.c shards; memory-mapped, several read as one) or UTF-8 text read as bytes
// (byte-level tokenizer: token id = byte value, vocab 256).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/trainer_config.hpp"
#include "trainer/data/token_files.hpp"

namespace meshrun::trainer {

enum class Split { kTrain, kVal };

class TokenDataset {
 public:
  /// Opens data.path (and data.val_path); throws UsageError naming the path when it is missing, empty or
  /// malformed, or when a validation file is also a training file.
  explicit TokenDataset(const DataConfig& config);
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  int64_t size() const { return size_; }
  int64_t split_size(Split split) const { return split == Split::kTrain ? train_size_ : val_size_; }
  uint32_t token(Split split, int64_t i) const;
  /// Largest token id in the first million tokens (for checking against model.vocab_size).
  uint32_t max_token_sampled() const;
  const std::vector<std::string>& files() const { return files_; }

 private:
  void split(const DataConfig& config);

  std::vector<std::string> files_;
  std::vector<uint8_t> bytes_;  // text: the concatenated files
  TokenSequence tokens_;        // token files
  TokenSequence val_tokens_;    // data.val_path's files, when set
  int64_t size_ = 0;            // tokens of the training files (the validation tail included)
  int64_t train_size_ = 0;
  int64_t val_size_ = 0;
};

/// The windows of one micro-batch. Sequence k of step s is a function of (seed, s, k) alone; a micro-batch
/// is sequences [first_seq, first_seq + B) of its step and rank r takes its r-th slice of B/N. So the global
/// batch is the same for any world size, and grad_accum_steps=4 with B sees what one micro-batch of 4B sees.
struct MicroBatch {
  int64_t batch = 0;  // local sequences
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;   // batch * seq_len
  std::vector<int64_t> targets;  // batch * seq_len (inputs shifted by one)
};

MicroBatch sample_micro_batch(const TokenDataset& data, Split split, uint64_t seed, int64_t step_index,
                              int64_t first_seq, int64_t global_batch, int64_t seq_len, int rank, int world_size);

/// Byte-level tokenizer for text data.
std::vector<int64_t> encode_bytes(const std::string& text);
std::string decode_bytes(const std::vector<int64_t>& tokens);

}  // namespace meshrun::trainer

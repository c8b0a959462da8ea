// Token files: the tokenized datasets people already have, memory-mapped.
//   bin_u16 / bin_u32  flat little-endian token ids (nanoGPT's train.bin / val.bin are uint16)
//   llmc               llm.c shards: a header of 256 int32 (magic 20240520, version 1 = uint16 tokens or
//                      2 = uint32, token count), then the tokens; the header is checked against the file
//   bin                either: an llm.c shard when the file starts with the magic, else flat uint16
// Several files (a directory or a glob, in name order) read as one sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/mapped_file.hpp"

namespace meshrun::trainer {

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr size_t kLlmcHeaderInts = 256;

/// One mapped token file. Throws UsageError naming the file and the numbers when it is malformed.
class TokenFile {
 public:
  TokenFile(const std::string& path, const std::string& format);
  int64_t size() const { return count_; }
  uint32_t at(int64_t i) const;
  const std::string& path() const { return path_; }
  bool has_llmc_header() const { return offset_ != 0; }

 private:
  std::string path_;
  MappedFile mapped_;
  size_t offset_ = 0;  // bytes before the first token (the llm.c header)
  int width_ = 2;      // bytes per token
  int64_t count_ = 0;
};

/// Files read one after another as a single sequence of tokens.
class TokenSequence {
 public:
  TokenSequence() = default;
  TokenSequence(const std::vector<std::string>& paths, const std::string& format);
  int64_t size() const { return starts_.empty() ? 0 : starts_.back(); }
  uint32_t at(int64_t i) const;
  bool empty() const { return files_.empty(); }

 private:
  std::vector<TokenFile> files_;
  std::vector<int64_t> starts_;  // starts_[k] = tokens before file k; starts_.back() = total
};

/// The files a data path names: one file, a directory's regular files (minus `exclude` globs) or a glob
/// pattern's matches, in name order. Throws UsageError (`what` names the config key) when there are none.
std::vector<std::string> resolve_data_files(const std::string& path, const std::vector<std::string>& exclude,
                                            const std::string& what);

}  // namespace meshrun::trainer

// The weights of a Hugging Face model folder: model.safetensors, or the sharded form
// (model.safetensors.index.json's weight_map naming the file of every tensor). Files are opened on
// first use; reads go to the file that holds the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer/checkpoint/safetensors_file.hpp"

namespace meshrun::trainer {

class HfWeights {
 public:
  /// Throws UsageError naming the folder when it holds neither form (and says so when it holds only
  /// PyTorch .bin weights), meshrun::Error naming the file when an index or a shard is unusable.
  explicit HfWeights(std::string folder);

  const std::string& folder() const { return folder_; }
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// nullptr when no file holds `name`.
  const SafetensorsTensor* find(const std::string& name);
  /// The file that holds `name` (its path, for messages).
  std::string file_of(const std::string& name) const;
  /// Elements [first, first + count) of `name` as fp32 (see SafetensorsFile::read_f32).
  void read_f32(const std::string& name, int64_t first, int64_t count, float* dst);
  /// Data bytes read so far, over all files.
  uint64_t bytes_read() const;
  /// The dtype names present ("BF16", "F32 + BF16", ...), for the log.
  std::string dtypes();

 private:
  SafetensorsFile& open(const std::string& file);

  std::string folder_;
  std::map<std::string, std::string> file_of_;  // tensor -> file name in the folder
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace meshrun::trainer

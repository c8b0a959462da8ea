#include "trainer/data/token_files.hpp"

#include <fnmatch.h>
#include <glob.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace fs = std::filesystem;

namespace {

bool starts_with_llmc_magic(const MappedFile& file) {
  int32_t magic = 0;
  if (file.size() < sizeof magic) return false;
  std::memcpy(&magic, file.data(), sizeof magic);
  return magic == kLlmcMagic;
}

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

}  // namespace

TokenFile::TokenFile(const std::string& path, const std::string& format) : path_(path), mapped_(path) {
  const size_t bytes = mapped_.size();
  const bool llmc = format == "llmc" || (format == "bin" && starts_with_llmc_magic(mapped_));
  if (llmc) {
    int32_t header[kLlmcHeaderInts] = {};
    if (bytes < sizeof header) {
      throw UsageError("'" + path + "' has " + std::to_string(bytes) + " bytes, less than the " +
                       std::to_string(sizeof header) + "-byte llm.c header: is data.format right?");
    }
    std::memcpy(header, mapped_.data(), sizeof header);
    if (header[0] != kLlmcMagic) {
      throw UsageError("'" + path + "' is not an llm.c token shard: its magic is " + std::to_string(header[0]) +
                       ", not " + std::to_string(kLlmcMagic) + " (flat nanoGPT files: data.format=bin_u16)");
    }
    if (header[1] != 1 && header[1] != 2) {
      throw UsageError("'" + path + "': llm.c header version " + std::to_string(header[1]) +
                       " is unknown (1: uint16 tokens, 2: uint32)");
    }
    offset_ = sizeof header;
    width_ = header[1] == 1 ? 2 : 4;
    count_ = header[2];
    const size_t expected = offset_ + static_cast<size_t>(std::max(count_, int64_t{0})) * static_cast<size_t>(width_);
    if (count_ < 0 || expected != bytes) {
      throw UsageError("'" + path + "': its llm.c header says " + std::to_string(header[2]) + " tokens of " +
                       std::to_string(width_) + " bytes (" + std::to_string(expected) + " bytes with the header), " +
                       "the file has " + std::to_string(bytes) + " bytes: truncated or not an llm.c shard");
    }
    return;
  }
  width_ = format == "bin_u32" ? 4 : 2;
  if (bytes % static_cast<size_t>(width_) != 0) {
    throw UsageError("'" + path + "' has " + std::to_string(bytes) + " bytes, not a multiple of " +
                     std::to_string(width_) + ": is data.format right?");
  }
  count_ = static_cast<int64_t>(bytes / static_cast<size_t>(width_));
}

uint32_t TokenFile::at(int64_t i) const {
  const uint8_t* p = mapped_.data() + offset_ + static_cast<size_t>(i) * static_cast<size_t>(width_);
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

TokenSequence::TokenSequence(const std::vector<std::string>& paths, const std::string& format) {
  int64_t total = 0;
  for (const auto& path : paths) {
    files_.emplace_back(path, format);
    starts_.push_back(total);
    total += files_.back().size();
  }
  starts_.push_back(total);
}

uint32_t TokenSequence::at(int64_t i) const {
  // The last file whose start is <= i (empty files share their start with the next one).
  const auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, i);
  const size_t k = static_cast<size_t>(it - starts_.begin()) - 1;
  return files_[k].at(i - starts_[k]);
}

std::vector<std::string> resolve_data_files(const std::string& path, const std::vector<std::string>& exclude,
                                            const std::string& what) {
  std::vector<std::string> files;
  std::error_code ec;
  const auto excluded = [&](const std::string& name) {
    return std::any_of(exclude.begin(), exclude.end(),
                       [&](const std::string& pattern) { return fnmatch(pattern.c_str(), name.c_str(), 0) == 0; });
  };
  if (fs::is_regular_file(path, ec)) return {path};
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      if (!entry.is_regular_file() || entry.is_symlink()) continue;
      if (!excluded(entry.path().filename().string())) files.push_back(entry.path().string());
    }
  } else if (is_glob(path)) {
    glob_t matches{};
    if (::glob(path.c_str(), 0, nullptr, &matches) == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        const std::string match = matches.gl_pathv[i];
        if (fs::is_regular_file(match, ec) && !excluded(fs::path(match).filename().string())) files.push_back(match);
      }
    }
    globfree(&matches);
    if (files.empty()) throw UsageError(what + " '" + path + "' matches no file");
  } else {
    throw UsageError(what + " '" + path +
                     "' does not exist (for the quickstart corpus: apt-get install fortunes fortunes-min, or run "
                     "scripts/setup.sh)");
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw UsageError(what + " '" + path + "' holds no files (after data.exclude)");
  return files;
}

}  // namespace meshrun::trainer

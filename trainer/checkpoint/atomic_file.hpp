// Crash-safe files for checkpoints: data goes to "<path>.tmp", is flushed to disk (fsync) and only then
// renamed to <path>, so a reader sees either the old state or the complete new file, never a torn one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/unique_fd.hpp"

namespace meshrun::trainer {

/// CRC-32 (zlib's polynomial, the one Python's zlib.crc32 computes), continuing from `crc`. ISA-L's
/// (libisal-dev) when the build found it, else zlib's.
uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

/// A file being written under a temporary name; commit() fsyncs and renames it into place. Destroyed
/// without commit(), the temporary file is removed.
class AtomicFile {
 public:
  /// Throws meshrun::Error naming the path when it cannot be created.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends n bytes; returns the CRC-32 of exactly these bytes.
  uint32_t write(const void* data, size_t n);
  uint64_t bytes_written() const { return written_; }
  /// fsync, rename over the final path, fsync the directory.
  void commit();

 private:
  std::string path_;
  std::string tmp_path_;
  UniqueFd fd_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

/// Writes a whole small file atomically (metadata, indexes, JSON).
void write_file_atomic(const std::string& path, const std::string& contents);
/// fsync of a directory, so a rename or an unlink inside it is durable.
void fsync_dir(const std::string& dir);

}  // namespace meshrun::trainer

// MappedFile: a whole file mapped read-only, unmapped by the destructor. The descriptor is closed as soon
// as the mapping exists (the mapping keeps the file alive), so no path leaks either on an exception.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace meshrun {

class MappedFile final {
 public:
  MappedFile() = default;
  /// Maps `path` (an empty file maps to size() == 0, data() == nullptr). Throws UsageError naming the
  /// path and the system's reason: the files mapped here are ones a user named.
  explicit MappedFile(const std::string& path) {
    const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) throw UsageError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw UsageError("cannot stat '" + path + "': " + std::strerror(errno));
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) throw UsageError("cannot mmap '" + path + "': " + std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  MappedFile& operator=(MappedFile&& other) noexcept {
    if (this != &other) {
      unmap();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~MappedFile() { unmap(); }

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void unmap() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
  }

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace meshrun

#include "launcher/memory/memfd_slot.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace meshrun::launcher {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& name) {
  throw std::runtime_error("memory copy slot '" + name + "': " + what + ": " + std::strerror(errno));
}

}  // namespace

MemfdSlot::MemfdSlot(const std::string& name, uint64_t bytes)
    : fd_(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING)), bytes_(rounded(bytes)) {
  if (!fd_.valid()) fail("memfd_create", name);
  if (::ftruncate(fd_.get(), static_cast<off_t>(bytes_)) != 0) fail("ftruncate", name);
  // Pages now, not at the first copy: a node without the memory finds out at start, not mid-training.
  if (const int e = ::posix_fallocate(fd_.get(), 0, static_cast<off_t>(bytes_)); e != 0) {
    errno = e;
    fail("allocating " + std::to_string(bytes_) + " bytes", name);
  }
  if (::fcntl(fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) fail("sealing its size", name);
}

proto::CopyHeader MemfdSlot::read_header() const {
  proto::CopyHeader header{};
  const ssize_t n = ::pread(fd_.get(), &header, sizeof header, 0);
  return n == static_cast<ssize_t>(sizeof header) ? header : proto::CopyHeader{};
}

std::string MemfdSlot::check() const {
  const proto::CopyHeader header = read_header();
  // validate_header reads only the header's bytes; the slot's size bounds the offsets.
  return proto::validate_header(&header, bytes_);
}

}  // namespace meshrun::launcher

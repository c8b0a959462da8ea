#include "trainer/distributed/cma_transport.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

namespace meshrun::trainer {

// Posts per rank that may be outstanding (posted, not yet read by every peer). The FSDP layer keeps a few in
// flight (limit_all_gathers gathers and two reductions); a post that finds its slot still unread waits.
constexpr uint64_t kPostSlots = 64;
constexpr size_t kErrorChars = 240;
// A post whose owner gave up on it (CmaTransport::cancel): its sequence number with the top bit set.
constexpr uint64_t kRetracted = uint64_t{1} << 63;

struct alignas(64) CmaPost {
  std::atomic<uint64_t> seq;  // written last: the other fields are valid once it shows this collective
  std::atomic<uint64_t> address;
  std::atomic<uint64_t> bytes;
  std::atomic<uint32_t> reads_done;  // peers that finished copying out of it
};

struct alignas(64) CmaRankBlock {
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> canary_address;
  std::atomic<uint64_t> canary_value;
  std::atomic<uint32_t> probe_failed;
  char probe_error[kErrorChars];
  CmaPost posts[kPostSlots];
};

struct alignas(64) CmaSegment {
  std::atomic<uint32_t> changes;  // the futex word: bumped by every post and every finished read
  std::atomic<uint32_t> arrived;  // ranks that mapped the segment and filled their block
  std::atomic<uint32_t> probed;   // ranks that tried to read every peer
  uint32_t size;
};

namespace {

using Clock = std::chrono::steady_clock;

CmaRankBlock& block_of(CmaSegment* segment, int rank) { return reinterpret_cast<CmaRankBlock*>(segment + 1)[rank]; }

// Not FUTEX_PRIVATE: the word lives in memory that other processes map. False when `limit` passed.
bool futex_wait(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::milliseconds limit) {
  timespec ts{static_cast<time_t>(limit.count() / 1000), static_cast<long>((limit.count() % 1000) * 1000000)};
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0) == 0 ||
         errno != ETIMEDOUT;
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void announce_change(CmaSegment* segment) {
  segment->changes.fetch_add(1, std::memory_order_acq_rel);
  futex_wake_all(segment->changes);
}

// Gone, or a zombie its parent has not reaped yet: either way it will never post or read again.
bool process_gone(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t name_end = line.rfind(')');  // the command name may hold spaces and parentheses
  return name_end != std::string::npos && name_end + 2 < line.size() &&
         (line[name_end + 2] == 'Z' || line[name_end + 2] == 'X');
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// Under Yama's ptrace_scope=1 a process may read only its descendants' memory, unless it is named the
// ptracer. Naming our parent (the launcher) lets every sibling worker read us, and nobody else.
void allow_siblings_to_read() { prctl(PR_SET_PTRACER, static_cast<unsigned long>(getppid()), 0, 0, 0); }

constexpr const char* kSegmentName = "meshrun-cma";

// True for "/proc/<pid>/fd/<fd>", the only form of path CmaSegmentFile hands out.
bool is_proc_fd_path(const std::string& path) {
  const auto number_at = [&path](size_t at) {  // where the digits from `at` end; `at` when there are none
    while (at < path.size() && std::isdigit(static_cast<unsigned char>(path[at])) != 0) ++at;
    return at;
  };
  if (path.rfind("/proc/", 0) != 0) return false;
  const size_t pid_end = number_at(6);
  if (pid_end == 6 || path.compare(pid_end, 4, "/fd/") != 0) return false;
  const size_t fd_end = number_at(pid_end + 4);
  return fd_end > pid_end + 4 && fd_end == path.size();
}

// What a /proc/.../fd/N link points at ("/memfd:meshrun-cma (deleted)" for a control block).
std::string link_target(const std::string& link) {
  char target[256] = {};
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  return {target, n > 0 ? static_cast<size_t>(n) : 0};
}

bool names_a_control_block(const std::string& target) {
  return target.rfind(std::string("/memfd:") + kSegmentName + " ", 0) == 0 ||
         target == std::string("/memfd:") + kSegmentName;
}

// Why the descriptor `fd`, opened from a path the store named, is not a control block group rank 0 made ("" when
// it is): a memfd of that name, as large as the group's block. The path comes from the store, which anyone who
// reaches it may write: a file must never be opened read-write and overwritten here.
std::string not_a_control_block(int fd, size_t bytes) {
  const std::string target = link_target("/proc/self/fd/" + std::to_string(fd));
  if (!names_a_control_block(target)) return "it is " + target + ", not a " + kSegmentName + " memfd";
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    return "it holds " + std::to_string(st.st_size) + " bytes, the group's block " + std::to_string(bytes);
  }
  return "";
}

}  // namespace

CmaSegmentFile::CmaSegmentFile(int size) {
  fd_ = memfd_create(kSegmentName, MFD_CLOEXEC);
  if (fd_ < 0) throw CmaUnavailable("cannot create the intra-node control block (memfd_create): " + errno_text(errno));
  // Zero-filled: every counter starts at 0.
  if (ftruncate(fd_, static_cast<off_t>(CmaTransport::segment_bytes(size))) != 0) {
    const int err = errno;
    close(fd_);
    throw CmaUnavailable("cannot size the intra-node control block: " + errno_text(err));
  }
  path_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd_);
}

CmaSegmentFile::~CmaSegmentFile() { close(fd_); }

CmaTransport::CmaTransport(const std::string& path, int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout), canary_(std::random_device{}() | 1) {
  if (size < 2 || rank < 0 || rank >= size) {
    throw Error("internal: cross-memory attach group of size " + std::to_string(size) + " has no rank " +
                std::to_string(rank));
  }
  allow_siblings_to_read();  // before any peer probes this rank
  map_segment(path);
}

void CmaTransport::connect() {
  CmaRankBlock& mine = block_of(segment_, rank_);
  mine.pid.store(getpid(), std::memory_order_relaxed);
  mine.canary_address.store(reinterpret_cast<uint64_t>(&canary_), std::memory_order_relaxed);
  mine.canary_value.store(canary_, std::memory_order_relaxed);
  segment_->arrived.fetch_add(1, std::memory_order_acq_rel);
  announce_change(segment_);
  await_all(segment_->arrived, "map the intra-node control block");
  probe_peers();
}

void CmaTransport::probe_peers() {
  // Every rank reads every peer's canary, publishes how that went, and learns everybody's result.
  CmaRankBlock& mine = block_of(segment_, rank_);
  std::string failure;
  for (int peer = 0; peer < size_ && failure.empty(); ++peer) {
    if (peer == rank_) continue;
    const CmaRankBlock& theirs = block_of(segment_, peer);
    uint64_t value = 0;
    iovec local{&value, sizeof value};
    iovec remote{reinterpret_cast<void*>(theirs.canary_address.load()), sizeof value};
    const ssize_t got = process_vm_readv(theirs.pid.load(), &local, 1, &remote, 1, 0);
    if (got != static_cast<ssize_t>(sizeof value)) {
      failure = "rank " + std::to_string(rank_) + " cannot read rank " + std::to_string(peer) +
                "'s memory with process_vm_readv: " + errno_text(got < 0 ? errno : EIO);
    } else if (value != theirs.canary_value.load()) {
      failure = "rank " + std::to_string(rank_) + " read the wrong bytes from rank " + std::to_string(peer) +
                " (another pid namespace?)";
    }
  }
  if (!failure.empty()) {
    std::strncpy(mine.probe_error, failure.c_str(), kErrorChars - 1);
    mine.probe_failed.store(1, std::memory_order_relaxed);
  }
  segment_->probed.fetch_add(1, std::memory_order_acq_rel);
  announce_change(segment_);
  await_all(segment_->probed, "check cross-memory attach");
  for (int r = 0; r < size_; ++r) {
    const CmaRankBlock& b = block_of(segment_, r);
    if (b.probe_failed.load(std::memory_order_acquire) != 0) {
      const std::string why(b.probe_error, strnlen(b.probe_error, kErrorChars));
      throw CmaUnavailable(why +
                           " (ptrace policy: kernel.yama.ptrace_scope above 1, or a seccomp filter; "
                           "system.intra_node=gloo uses sockets instead)");
    }
  }
}

CmaTransport::~CmaTransport() {
  if (segment_ != nullptr) munmap(segment_, segment_bytes_);
}

size_t CmaTransport::segment_bytes(int size) {
  return sizeof(CmaSegment) + static_cast<size_t>(size) * sizeof(CmaRankBlock);
}

void CmaTransport::map_segment(const std::string& path) {
  segment_bytes_ = segment_bytes(size_);
  // A memfd of another process opens through /proc/<pid>/fd/<fd>: the kernel allows it to whoever may
  // ptrace that process, the same permission process_vm_readv needs. Nothing else is opened.
  if (!is_proc_fd_path(path) || !names_a_control_block(link_target(path))) {
    throw CmaUnavailable("rank " + std::to_string(rank_) + " refuses the intra-node control block '" + path +
                         "' the store named: not a " + kSegmentName + " memfd's /proc/PID/fd/FD path");
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw CmaUnavailable("rank " + std::to_string(rank_) + " cannot open the intra-node control block " + path + ": " +
                         errno_text(errno));
  }
  if (const std::string why = not_a_control_block(fd, segment_bytes_); !why.empty()) {
    close(fd);
    throw CmaUnavailable("rank " + std::to_string(rank_) + " refuses the intra-node control block " + path + ": " +
                         why);
  }
  void* mapped = mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (mapped == MAP_FAILED) {
    throw CmaUnavailable("rank " + std::to_string(rank_) + " cannot map the intra-node control block " + path + ": " +
                         errno_text(err));
  }
  segment_ = static_cast<CmaSegment*>(mapped);
}

void CmaTransport::await_all(const std::atomic<uint32_t>& count, const char* stage) {
  drive_until([&] { return count.load(std::memory_order_acquire) >= static_cast<uint32_t>(size_); },
              [&] {
                return std::string(stage) + " (" + std::to_string(count.load()) + " of " + std::to_string(size_) +
                       " ranks did)";
              });
}

void CmaTransport::drive_until(const std::function<bool()>& done, const std::function<std::string()>& what) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    const uint32_t seen = segment_->changes.load(std::memory_order_acquire);
    progress();
    if (done()) return;
    wait_for_change(seen, deadline, what);
  }
}

uint64_t CmaTransport::post(const void* base, size_t bytes) {
  const uint64_t seq = next_seq_ + 1;  // taken only once posted: a failed post leaves the sequence as it was
  CmaPost& slot = block_of(segment_, rank_).posts[seq % kPostSlots];
  const uint64_t previous = slot.seq.load(std::memory_order_acquire);
  if (previous != 0) {
    // The slot's previous collective must be read by every peer before its fields change.
    drive_until([&] { return read_by_all(previous); },
                [&] { return "the peers to read collective " + std::to_string(previous) + missing_for(previous); });
  }
  slot.address.store(reinterpret_cast<uint64_t>(base), std::memory_order_relaxed);
  slot.bytes.store(bytes, std::memory_order_relaxed);
  slot.reads_done.store(0, std::memory_order_relaxed);
  slot.seq.store(seq, std::memory_order_release);
  announce_change(segment_);
  next_seq_ = seq;
  return seq;
}

void CmaTransport::expect(uint64_t seq, int peer, size_t offset, void* dst, size_t bytes) {
  expected_.push_back({seq, peer, offset, dst, bytes});
}

bool CmaTransport::read_by_all(uint64_t seq) const {
  const CmaPost& slot = block_of(segment_, rank_).posts[seq % kPostSlots];
  return slot.seq.load(std::memory_order_acquire) != seq ||
         slot.reads_done.load(std::memory_order_acquire) >= static_cast<uint32_t>(size_ - 1);
}

std::string CmaTransport::missing_for(uint64_t seq) const {
  std::string unposted;
  for (const ExpectedCopy& c : expected_) {
    if (c.seq == seq) unposted += (unposted.empty() ? "" : ", ") + std::to_string(c.peer);
  }
  std::string out;
  if (!unposted.empty()) out += "; waiting for rank(s) " + unposted + " to post their input";
  if (!read_by_all(seq)) {
    const uint32_t done = block_of(segment_, rank_).posts[seq % kPostSlots].reads_done.load();
    out += "; " + std::to_string(size_ - 1 - static_cast<int>(done)) + " peer(s) have not read this rank's input";
  }
  return out;
}

void CmaTransport::complete(uint64_t seq) {
  drive_until(
      [&] {
        return read_by_all(seq) &&
               std::none_of(expected_.begin(), expected_.end(), [seq](const ExpectedCopy& c) { return c.seq == seq; });
      },
      [&] { return "collective " + std::to_string(seq) + missing_for(seq); });
}

void CmaTransport::cancel(uint64_t seq) noexcept {
  std::erase_if(expected_, [seq](const ExpectedCopy& c) { return c.seq == seq; });
  // Retract the post: its memory may go now, and a peer that has not read it yet must fail, not copy it.
  CmaPost& slot = block_of(segment_, rank_).posts[seq % kPostSlots];
  uint64_t posted = seq;
  if (slot.seq.compare_exchange_strong(posted, seq | kRetracted, std::memory_order_acq_rel)) announce_change(segment_);
}

void CmaTransport::progress() {
  for (size_t i = 0; i < expected_.size();) {
    const ExpectedCopy& copy = expected_[i];
    const CmaPost& slot = block_of(segment_, copy.peer).posts[copy.seq % kPostSlots];
    const uint64_t posted = slot.seq.load(std::memory_order_acquire);
    if (posted == (copy.seq | kRetracted)) {
      throw Error("rank " + std::to_string(copy.peer) + " abandoned collective " + std::to_string(copy.seq) +
                  " before rank " + std::to_string(rank_) + " read it (that rank failed; its own error says why)");
    }
    if (posted != copy.seq) {
      ++i;
      continue;
    }
    read_from_peer(copy);
    expected_.erase(expected_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void CmaTransport::read_from_peer(const ExpectedCopy& copy) {
  CmaPost& slot = block_of(segment_, copy.peer).posts[copy.seq % kPostSlots];
  const uint64_t posted = slot.bytes.load(std::memory_order_relaxed);
  if (copy.offset + copy.bytes > posted) {
    throw Error("ranks disagree on a collective's size: rank " + std::to_string(rank_) + " expects " +
                std::to_string(copy.offset + copy.bytes) + " bytes of rank " + std::to_string(copy.peer) +
                "'s input of collective " + std::to_string(copy.seq) + ", which has " + std::to_string(posted) +
                " (the ranks run different models or configs)");
  }
  const pid_t pid = block_of(segment_, copy.peer).pid.load(std::memory_order_relaxed);
  const uint64_t source = slot.address.load(std::memory_order_relaxed) + copy.offset;
  size_t done = 0;
  while (done < copy.bytes) {
    iovec local{static_cast<char*>(copy.dst) + done, copy.bytes - done};
    iovec remote{reinterpret_cast<void*>(source + done), copy.bytes - done};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      throw NetworkError("rank " + std::to_string(rank_) + " cannot read rank " + std::to_string(copy.peer) +
                         "'s input of collective " + std::to_string(copy.seq) + " (pid " + std::to_string(pid) + "): " +
                         errno_text(got < 0 ? errno : EIO) + (process_gone(pid) ? "; that rank has exited" : ""));
    }
    done += static_cast<size_t>(got);
  }
  slot.reads_done.fetch_add(1, std::memory_order_acq_rel);
  announce_change(segment_);
}

void CmaTransport::wait_for_change(uint32_t seen, Clock::time_point deadline,
                                   const std::function<std::string()>& what) {
  const auto now = Clock::now();
  if (now >= deadline) {
    throw TimeoutError("rank " + std::to_string(rank_) +
                       " waited system.timeout_s=" + std::to_string(timeout_.count() / 1000) + "s for " + what());
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  // Quiet for 100 ms: perhaps a peer is gone (it would never post or read again).
  if (!futex_wait(segment_->changes, seen,
                  std::min(left + std::chrono::milliseconds(1), std::chrono::milliseconds(100))))
    check_peers();
}

void CmaTransport::check_peers() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const pid_t pid = block_of(segment_, peer).pid.load(std::memory_order_relaxed);
    if (process_gone(pid)) {
      throw NetworkError("rank " + std::to_string(peer) + " of this node (pid " + std::to_string(pid) +
                         ") exited while rank " + std::to_string(rank_) + " was in a collective with it");
    }
  }
}

}  // namespace meshrun::trainer

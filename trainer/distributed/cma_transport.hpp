// CmaTransport: all-gathers and reduce-scatters between the ranks of one node without sockets. Each rank
// posts the address and size of its input in a small shared-memory control block; the others copy straight
// out of its memory with process_vm_readv (Linux cross-memory attach). That is one kernel copy per byte where
// Gloo's loopback TCP makes two (into the socket, out of it), with no TCP stack and no Gloo thread between.
//
// Ordering: every rank issues the group's collectives in the same order (the FSDP layer does; Gloo's
// point-to-point tags rely on it too), so the n-th post of every rank belongs to the same collective. A rank
// blocked in complete() copies whatever its other pending collectives can already read, so ranks that wait
// in different orders still make progress. complete(seq) returns only after every peer has read this rank's
// input for `seq`: the caller may then free or overwrite it.
//
// Failure: a peer that exits (its pid gone, or a zombie) or a wait longer than the timeout ends the wait with
// an error naming the rank, instead of hanging; a collective its owner retracted (cancel) fails naming it. Not
// thread-safe: one thread (the training loop) drives it. Torch-free on purpose: it moves bytes; the Communicator
// decides what they are.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace meshrun::trainer {

struct CmaSegment;  // the shared control block (cma_transport.cpp)

/// Cross-memory attach cannot work here (a peer's memory is not readable: ptrace policy, seccomp, another
/// pid namespace). Every rank of the group gets it with the same reason, so all can fall back together.
class CmaUnavailable : public Error {
 public:
  using Error::Error;
};

/// The control block's memory, made by one rank of the group: a memfd, so it has no name and nothing
/// outlives the processes. The others open it through path() while this object lives (until connect()).
class CmaSegmentFile {
 public:
  explicit CmaSegmentFile(int size);  // throws CmaUnavailable
  ~CmaSegmentFile();
  CmaSegmentFile(const CmaSegmentFile&) = delete;
  CmaSegmentFile& operator=(const CmaSegmentFile&) = delete;
  /// "/proc/<pid>/fd/<fd>"
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

class CmaTransport {
 public:
  /// Rank `rank` of `size` maps the control block at `path` (CmaSegmentFile::path()). Throws CmaUnavailable
  /// when this rank cannot (the caller tells the others).
  CmaTransport(const std::string& path, int rank, int size, std::chrono::milliseconds timeout);
  ~CmaTransport();
  CmaTransport(const CmaTransport&) = delete;
  CmaTransport& operator=(const CmaTransport&) = delete;

  /// Collective: returns when every rank has mapped the block and checked that it can read every peer's
  /// memory. Throws CmaUnavailable (the same on every rank) when some rank cannot read a peer, and
  /// TimeoutError naming how many ranks arrived within the timeout.
  void connect();
  static size_t segment_bytes(int size);

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Publishes this rank's input of the next collective; returns its sequence number (the same on every rank
  /// for the same collective). `base` must stay valid and unchanged until complete() of that number returns.
  uint64_t post(const void* base, size_t bytes);
  /// Registers a copy of `bytes` bytes at `offset` in `peer`'s input of collective `seq` into `dst`.
  void expect(uint64_t seq, int peer, size_t offset, void* dst, size_t bytes);
  /// Blocks until this rank's expected copies of `seq` landed and every peer read this rank's input of `seq`.
  void complete(uint64_t seq);
  /// Drops the copies still expected for `seq` (their destination is going away: an error path) and
  /// retracts this rank's input of it: a peer that has not read it yet fails with an error naming this rank.
  void cancel(uint64_t seq) noexcept;

 private:
  struct ExpectedCopy {
    uint64_t seq;
    int peer;
    size_t offset;
    void* dst;
    size_t bytes;
  };
  void map_segment(const std::string& path);
  /// Reads every peer's canary; throws CmaUnavailable on every rank if any rank could not.
  void probe_peers();
  void await_all(const std::atomic<uint32_t>& counter, const char* stage);
  void check_peers();
  /// Copies every expected piece whose peer has posted.
  void progress();
  /// Copies what can be copied and sleeps on the segment until `done`; `what` names the wait for the timeout.
  void drive_until(const std::function<bool()>& done, const std::function<std::string()>& what);
  void read_from_peer(const ExpectedCopy& copy);
  /// Sleeps until the segment changes (a post or a read anywhere), at most ~100 ms; then checks that the peers
  /// live and that `deadline` has not passed (`what()` says what is awaited, built only for the error).
  void wait_for_change(uint32_t seen, std::chrono::steady_clock::time_point deadline,
                       const std::function<std::string()>& what);
  bool read_by_all(uint64_t seq) const;
  std::string missing_for(uint64_t seq) const;

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  CmaSegment* segment_ = nullptr;
  size_t segment_bytes_ = 0;
  uint64_t next_seq_ = 0;
  uint64_t canary_;  // read by every peer at start-up: proves cross-memory attach works
  std::vector<ExpectedCopy> expected_;
};

}  // namespace meshrun::trainer

// CollectiveLedger: meshrun-trainer's own record of its collectives, in the form meshrun's agent reads
// from PyTorch workers through its Python hook (docs/progress.md#hangs): per process group its member
// ranks and the sequence numbers of the last collective entered and the last completed, and the recent
// collectives (op, sizes, dtype, when entered, completed or not). Its collectives (Gloo, NCCL and the
// cross-memory-attach ones, which no PyTorch recorder sees) are recorded by the Communicator; the
// CollectiveReporter hands the ledger to the agent. Thread-safe; torch-free.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "proto/worker/collective_dump.hpp"
#include "proto/worker/hook_messages.hpp"

namespace meshrun::trainer {

class CollectiveLedger {
 public:
  /// Recent collectives kept (the open ones and the last ones completed).
  static constexpr size_t kRecent = 64;

  /// Declares a process group (global ranks). Group "0" is the job's default group.
  void add_group(const std::string& name, std::vector<int> ranks);
  /// A collective entered on `group`: its sequence number (1, 2, ... per group, like PyTorch's).
  int64_t enter(const std::string& group, const std::string& op, const std::string& sizes, const std::string& dtype);
  /// The number the next collective of `group` will get.
  int64_t next_seq(const std::string& group) const;
  /// The collective `seq` of `group` completed. Completions may come out of order: the last completed is
  /// the highest number up to which every collective completed.
  void complete(const std::string& group, int64_t seq);

  /// The hook's status message: each group that ran a collective, its last entered and last completed.
  proto::HookMessage status() const;
  /// The record the agent asks for when a hang is suspected (the Python hook's, from PyTorch's recorder).
  proto::CollectiveDump dump() const;

 private:
  struct Group {
    std::vector<int> ranks;
    int64_t last_enqueued = 0;
    int64_t last_completed = 0;
    std::vector<int64_t> done_ahead;  // completed above last_completed
  };
  mutable std::mutex mutex_;
  std::map<std::string, Group> groups_;
  std::deque<proto::CollectiveEntry> recent_;
};

}  // namespace meshrun::trainer

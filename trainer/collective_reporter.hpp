// CollectiveReporter: hands meshrun-trainer's CollectiveLedger to its agent the way meshrun's Python hook
// does for PyTorch workers (docs/progress.md#hangs): on <MESHRUN_PROGRESS>.fr, "fr hello", then the ledger's
// status every 0.1 s when it changed (and every 5 s); on <MESHRUN_PROGRESS>.hook it answers "dump <path>"
// by writing the ledger there and saying "fr dumped <path>" (proto/worker/hook_messages.hpp). One thread, never on
// the training path; nothing without MESHRUN_PROGRESS.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/unique_fd.hpp"
#include "trainer/distributed/collective_ledger.hpp"

namespace meshrun::trainer {

class CollectiveReporter {
 public:
  /// `agent_socket` empty: off. When the request socket cannot be bound it says so and stays off.
  CollectiveReporter(std::string agent_socket, std::shared_ptr<const CollectiveLedger> ledger);
  ~CollectiveReporter();
  CollectiveReporter(const CollectiveReporter&) = delete;
  CollectiveReporter& operator=(const CollectiveReporter&) = delete;

 private:
  void run();
  void send(const std::string& text) const;
  void answer(const std::string& datagram) const;

  std::string agent_;
  std::string listen_path_;
  std::shared_ptr<const CollectiveLedger> ledger_;
  UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace meshrun::trainer

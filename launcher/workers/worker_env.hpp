// WorkerEnvironment: the environment each worker starts with, exactly as torchrun sets it (RANK, LOCAL_RANK,
// WORLD_SIZE, ..., MASTER_ADDR/PORT, TORCHELASTIC_*), built once per attempt on top of the launcher's own,
// plus the network interface for Gloo and NCCL (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) when the user did
// not choose one.
#pragma once

#include <string>
#include <vector>

namespace meshrun::launcher {

/// Settings shared by every worker of one attempt on this node.
struct AttemptSettings {
  std::string role = "default";
  std::string run_id = "none";
  std::string master_addr;  // the workers' TCPStore (the daemon's per-run port)
  int master_port = 0;
  std::string rdzv_endpoint;  // "host:port" of the rendezvous, for meshrun-trainer (MESHRUN_RDZV_ENDPOINT)
  int restart_count = 0;
  int max_restarts = 0;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun
  int group_rank = 0;
  int group_world_size = 1;
  int world_size = 1;
  int local_world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  bool virtual_local_rank = false;
  std::string job_token;      // MESHRUN_JOB_TOKEN (job_token.hpp); empty leaves it unset
  std::string memory_socket;  // MESHRUN_MEMORY: the agent's memory-copy handover socket; empty leaves it unset
  bool quick_exit = false;    // MESHRUN_QUICK_EXIT=1: a failure here will be restarted (docs/multi-node.md#quick-exit)
  // The interface that reaches the rendezvous (launcher/net/route_interface.hpp): exported as
  // GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME ("=" + name: exactly it), each unless the launcher's own
  // environment sets it. Empty leaves both to the user and the libraries' defaults.
  std::string socket_ifname;
};

/// Per-worker values.
struct WorkerSlot {
  int local_rank = 0;
  std::string error_file;       // TORCHELASTIC_ERROR_FILE; empty leaves it unset
  std::string progress_socket;  // MESHRUN_PROGRESS (docs/progress.md); empty leaves it unset
};

class WorkerEnvironment {
 public:
  /// `base` is "KEY=VALUE" entries (the launcher's environ); entries we set are dropped from it once here.
  WorkerEnvironment(const std::vector<std::string>& base, AttemptSettings settings);

  /// The full "KEY=VALUE" list for one worker.
  std::vector<std::string> for_worker(const WorkerSlot& slot) const;

  const AttemptSettings& settings() const { return settings_; }

 private:
  std::vector<std::string> common_;   // base minus overridden keys, plus the per-attempt values
  std::string cuda_visible_devices_;  // the launcher's value, for --virtual-local-rank
  AttemptSettings settings_;
};

/// The current process's environment as "KEY=VALUE" entries.
std::vector<std::string> current_environment();

}  // namespace meshrun::launcher

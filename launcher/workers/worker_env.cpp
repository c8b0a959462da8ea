#include "launcher/workers/worker_env.hpp"

#include <algorithm>
#include <string_view>

#include "launcher/workers/worker_env_keys.hpp"

extern char** environ;  // NOLINT: POSIX

namespace meshrun::launcher {
namespace {

std::string_view key_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }

std::string entry(std::string_view key, const std::string& value) { return std::string(key) + "=" + value; }

}  // namespace

WorkerEnvironment::WorkerEnvironment(const std::vector<std::string>& base, AttemptSettings settings)
    : settings_(std::move(settings)) {
  bool has_omp = false, has_nccl_async = false, has_gloo_ifname = false, has_nccl_ifname = false;
  common_.reserve(base.size() + 16);
  for (const auto& e : base) {
    const auto key = key_of(e);
    if (key == "OMP_NUM_THREADS") has_omp = true;
    if (key == "TORCH_NCCL_ASYNC_ERROR_HANDLING") has_nccl_async = true;
    if (key == "GLOO_SOCKET_IFNAME" || key == "NCCL_SOCKET_IFNAME") {
      // An empty value names no interface: ours replaces it.
      if (e.size() == key.size() + 1 && !settings_.socket_ifname.empty()) continue;
      (key == "GLOO_SOCKET_IFNAME" ? has_gloo_ifname : has_nccl_ifname) = true;
    }
    if (key == "CUDA_VISIBLE_DEVICES") cuda_visible_devices_ = e.substr(key.size() + 1);
    if (std::find(kWorkerEnvKeys.begin(), kWorkerEnvKeys.end(), key) != kWorkerEnvKeys.end()) {
      // CUDA_VISIBLE_DEVICES is only ours under --virtual-local-rank.
      if (key != "CUDA_VISIBLE_DEVICES" || settings_.virtual_local_rank) continue;
    }
    common_.push_back(e);
  }
  const auto& s = settings_;
  common_.push_back(entry("WORLD_SIZE", std::to_string(s.world_size)));
  common_.push_back(entry("LOCAL_WORLD_SIZE", std::to_string(s.local_world_size)));
  common_.push_back(entry("GROUP_RANK", std::to_string(s.group_rank)));
  common_.push_back(entry("GROUP_WORLD_SIZE", std::to_string(s.group_world_size)));
  common_.push_back(entry("ROLE_WORLD_SIZE", std::to_string(s.world_size)));
  common_.push_back(entry("ROLE_NAME", s.role));
  common_.push_back(entry("MASTER_ADDR", s.master_addr));
  common_.push_back(entry("MASTER_PORT", std::to_string(s.master_port)));
  common_.push_back(entry("TORCHELASTIC_RESTART_COUNT", std::to_string(s.restart_count)));
  common_.push_back(entry("TORCHELASTIC_MAX_RESTARTS", std::to_string(s.max_restarts)));
  common_.push_back(entry("TORCHELASTIC_RUN_ID", s.run_id));
  common_.push_back(entry("TORCHELASTIC_SIGNALS_TO_HANDLE", s.signals_to_handle));
  // Workers connect to our store as clients instead of rank 0 hosting one (torch/distributed/rendezvous.py).
  common_.push_back(entry("TORCHELASTIC_USE_AGENT_STORE", "True"));
  if (!s.rdzv_endpoint.empty()) common_.push_back(entry("MESHRUN_RDZV_ENDPOINT", s.rdzv_endpoint));
  // A nested meshrun's workers carry their own launcher's token, not the outer one's.
  if (!s.job_token.empty()) common_.push_back(entry("MESHRUN_JOB_TOKEN", s.job_token));
  if (!s.memory_socket.empty()) common_.push_back(entry("MESHRUN_MEMORY", s.memory_socket));
  if (s.quick_exit) common_.push_back(entry("MESHRUN_QUICK_EXIT", "1"));
  // torchrun's defaults: one OpenMP thread per worker when several share the node; NCCL async errors on.
  if (!has_omp && s.local_world_size > 1) common_.push_back(entry("OMP_NUM_THREADS", "1"));
  if (!has_nccl_async) common_.push_back(entry("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"));
  // One network for the store, Gloo and NCCL: the one that reaches the rendezvous. A user's choice wins.
  // NCCL_SOCKET_IFNAME takes prefixes ("eth" would match eth1 too); "=" asks for exactly this interface.
  if (!s.socket_ifname.empty()) {
    if (!has_gloo_ifname) common_.push_back(entry("GLOO_SOCKET_IFNAME", s.socket_ifname));
    if (!has_nccl_ifname) common_.push_back(entry("NCCL_SOCKET_IFNAME", "=" + s.socket_ifname));
  }
}

std::vector<std::string> WorkerEnvironment::for_worker(const WorkerSlot& slot) const {
  std::vector<std::string> env;
  env.reserve(common_.size() + 5);
  env = common_;
  const int rank = settings_.rank_offset + slot.local_rank;
  env.push_back(entry("RANK", std::to_string(rank)));
  env.push_back(entry("ROLE_RANK", std::to_string(rank)));
  if (settings_.virtual_local_rank) {
    // Every worker sees exactly one device, at index 0.
    env.push_back(entry("LOCAL_RANK", "0"));
    std::string device = std::to_string(slot.local_rank);
    if (!cuda_visible_devices_.empty()) {
      std::vector<std::string> ids;
      size_t start = 0;
      while (start <= cuda_visible_devices_.size()) {
        const auto comma = cuda_visible_devices_.find(',', start);
        ids.push_back(cuda_visible_devices_.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (static_cast<size_t>(slot.local_rank) < ids.size()) device = ids[static_cast<size_t>(slot.local_rank)];
    }
    env.push_back(entry("CUDA_VISIBLE_DEVICES", device));
  } else {
    env.push_back(entry("LOCAL_RANK", std::to_string(slot.local_rank)));
  }
  if (!slot.error_file.empty()) env.push_back(entry("TORCHELASTIC_ERROR_FILE", slot.error_file));
  if (!slot.progress_socket.empty()) env.push_back(entry("MESHRUN_PROGRESS", slot.progress_socket));
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace meshrun::launcher

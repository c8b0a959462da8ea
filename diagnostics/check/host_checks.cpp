#include "diagnostics/check/host_checks.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/strings.hpp"
#include "diagnostics/check/gpu_probe.hpp"
#include "diagnostics/check/port_owner.hpp"
#include "diagnostics/net/network_interfaces.hpp"
#include "diagnostics/ping/resolve.hpp"
#include "proto/store/store_client.hpp"

namespace meshrun::diagnostics {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

CheckResult check_hostname(bool multi_node, Duration timeout) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  const std::string host = name;
  std::vector<std::string> addresses;
  try {
    addresses = resolve_host(host, timeout);
  } catch (const proto::ConnectError& e) {
    auto r = make_result(multi_node ? CheckStatus::kWarn : CheckStatus::kPass, "host.name",
                         "host name '" + host + "' does not resolve: " + e.what(),
                         multi_node ? "add it to /etc/hosts with this node's private IP, or pass --local-addr" : "");
    r.data = {{"hostname", host}, {"addresses", nlohmann::json::array()}};
    return r;
  }
  const bool loopback_only = std::all_of(addresses.begin(), addresses.end(), is_loopback_address);
  CheckResult r;
  if (loopback_only && multi_node) {
    r = make_result(CheckStatus::kWarn, "host.name",
                    "host name '" + host + "' resolves to " + join(addresses) +
                        " (loopback): other nodes that are given this name reach themselves, not this node",
                    "map the name to this node's private IP in /etc/hosts (Debian puts 127.0.1.1 there), or pass "
                    "--local-addr with that IP");
  } else {
    r = make_result(CheckStatus::kPass, "host.name", "host name '" + host + "' resolves to " + join(addresses));
  }
  r.data = {{"hostname", host}, {"addresses", addresses}, {"loopback_only", loopback_only}};
  return r;
}

CheckResult check_interfaces(bool multi_node) {
  std::vector<std::string> shown;
  nlohmann::json data = nlohmann::json::array();
  bool reachable = false;
  for (const auto& a : list_local_addresses()) {
    const std::string scope = address_scope(a.address);
    data.push_back({{"interface", a.interface}, {"address", a.address}, {"up", a.up}, {"scope", scope}});
    if (scope == "loopback") continue;
    shown.push_back(a.interface + " " + a.address + " (" + scope + (a.up ? "" : ", down") + ")");
    reachable = reachable || (a.up && scope != "link-local");
  }
  CheckResult r;
  if (!reachable && multi_node) {
    r = make_result(CheckStatus::kFail, "host.interfaces",
                    shown.empty() ? "no address except loopback" : "no usable address: " + join(shown),
                    "a multi-node job needs an interface with an address the other nodes can reach");
  } else {
    r = make_result(CheckStatus::kPass, "host.interfaces", shown.empty() ? "loopback only" : join(shown));
  }
  r.data = {{"addresses", data}};
  return r;
}

std::vector<CheckResult> check_socket_ifname_env() {
  std::vector<CheckResult> out;
  const auto names = list_interface_names();
  for (const char* var : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const std::string spec = env_or_empty(var);
    if (spec.empty()) continue;
    const bool nccl = var[0] == 'N';
    const std::string check = nccl ? "host.nccl_socket_ifname" : "host.gloo_socket_ifname";
    const auto matches = nccl ? nccl_ifname_matches(spec, names) : gloo_ifname_matches(spec, names);
    CheckResult r;
    if (matches.empty()) {
      r = make_result(CheckStatus::kFail, check,
                      std::string(var) + "=" + spec + " names no interface of this host (it has: " + join(names) + ")",
                      std::string("set ") + var + " to one of this node's interfaces, or unset it; " +
                          (nccl ? "NCCL" : "Gloo") + " cannot create its sockets otherwise");
    } else {
      r = make_result(CheckStatus::kPass, check, std::string(var) + "=" + spec + " selects " + join(matches));
    }
    r.data = {{"variable", var}, {"value", spec}, {"matches", matches}, {"interfaces", names}};
    out.push_back(std::move(r));
  }
  return out;
}

CheckResult check_ports(const std::vector<uint16_t>& ports, std::optional<uint16_t> endpoint_port) {
  std::vector<std::string> busy;
  std::vector<std::string> fine;
  nlohmann::json data = nlohmann::json::array();
  for (uint16_t port : ports) {
    const auto listeners = find_port_listeners(port);
    nlohmann::json owners = nlohmann::json::array();
    std::vector<std::string> who;
    bool daemon = !listeners.empty();
    for (const auto& l : listeners) {
      owners.push_back({{"address", l.address}, {"pid", l.pid}, {"command", l.command}});
      who.push_back(l.pid > 0 ? "pid " + std::to_string(l.pid) + " (" + l.command + ") on " + l.address
                              : "an unknown process (run as root to see it) on " + l.address);
      // /proc/<pid>/comm is cut at 15 characters: "meshrun-rendezv".
      daemon = daemon && l.command.rfind("meshrun-rendezv", 0) == 0;
    }
    data.push_back({{"port", port}, {"in_use", !listeners.empty()}, {"listeners", owners}});
    if (listeners.empty()) {
      fine.push_back(std::to_string(port) + " free");
    } else if (daemon && endpoint_port == port) {
      fine.push_back(std::to_string(port) + " held by the rendezvous daemon (" + join(who) + ")");
    } else {
      busy.push_back("port " + std::to_string(port) + " is in use by " + join(who));
    }
  }
  CheckResult r;
  if (!busy.empty()) {
    r = make_result(CheckStatus::kWarn, "host.ports", join(busy, "; "),
                    "a daemon or master started on this host with that port fails to bind: stop that process or pick "
                    "another --rdzv-endpoint port / --master-port");
  } else {
    r = make_result(CheckStatus::kPass, "host.ports", fine.empty() ? "no ports to check" : join(fine));
  }
  r.data = {{"ports", data}};
  return r;
}

CheckResult judge_driver(int cuda_version, const std::string& release) {
  // CUDA 13 needs the R580 driver branch; PyTorch's PyPI wheels are CUDA 13 builds (cu130) since 2.9.
  constexpr int kCuda13 = 13000;
  const std::string driver = "driver " + (release.empty() ? std::string("(release unknown)") : release) +
                             " runs CUDA up to " + cuda_version_text(cuda_version);
  if (cuda_version >= kCuda13) {
    return make_result(CheckStatus::kPass, "gpu.driver", driver + ": CUDA 13 builds (PyTorch's cu130 wheels) run");
  }
  return make_result(CheckStatus::kWarn, "gpu.driver",
                     driver +
                         ": CUDA 13 builds, which PyTorch's default wheels are, need driver R580 or newer "
                         "(they fail with 'driver too old' / no CUDA device)",
                     "upgrade the NVIDIA driver to R580+, or install a CUDA 12 build of torch "
                     "(pip install torch --index-url https://download.pytorch.org/whl/cu126)");
}

namespace {

// CUDA_VISIBLE_DEVICES as this process sees it (set but empty hides every GPU, unset hides none).
struct VisibleDevicesEnv {
  bool set = false;
  std::string value;
};

VisibleDevicesEnv read_visible_devices_env() {
  return {.set = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr, .value = env_or_empty("CUDA_VISIBLE_DEVICES")};
}

// The facts behind every gpu.* result (each carries all of them).
nlohmann::json gpu_data(const GpuInfo& gpu, const VisibleDevicesEnv& cvd) {
  return {{"driver_found", gpu.driver_found},
          {"device_count", gpu.device_count},
          {"driver_version", gpu.driver_version},
          {"driver_release", gpu.driver_release},
          {"cuda_visible_devices", cvd.set ? nlohmann::json(cvd.value) : nlohmann::json(nullptr)},
          {"nccl_found", gpu.nccl_found},
          {"nccl_version", gpu.nccl_version}};
}

// gpu.devices: how many GPUs CUDA sees; none is expected on a CPU node.
CheckResult devices_result(const GpuInfo& gpu, const VisibleDevicesEnv& cvd) {
  if (gpu.device_count == 0) {
    std::string why = gpu.driver_error.empty() ? "the driver reports 0 devices" : gpu.driver_error;
    if (cvd.set) why += "; CUDA_VISIBLE_DEVICES='" + cvd.value + "'";
    return make_result(CheckStatus::kWarn, "gpu.devices", "no GPU visible: CPU/Gloo will be used (" + why + ")",
                       "expected on a CPU node; on a GPU node check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES");
  }
  return make_result(CheckStatus::kPass, "gpu.devices",
                     std::to_string(gpu.device_count) + " GPU(s) visible to CUDA (driver API " +
                         cuda_version_text(gpu.driver_version) + ")" +
                         (cvd.set ? ", CUDA_VISIBLE_DEVICES='" + cvd.value + "'" : ""));
}

// gpu.visible_devices: whether --nproc-per-node ranks each get their own GPU.
CheckResult nproc_fit_result(int nproc_per_node, const GpuInfo& gpu, const VisibleDevicesEnv& cvd) {
  if (nproc_per_node > gpu.device_count) {
    return make_result(CheckStatus::kWarn, "gpu.visible_devices",
                       "--nproc-per-node " + std::to_string(nproc_per_node) + " but only " +
                           std::to_string(gpu.device_count) + " GPU(s) visible" +
                           (cvd.set ? " (CUDA_VISIBLE_DEVICES='" + cvd.value + "')" : "") +
                           ": several ranks would share a GPU",
                       "lower --nproc-per-node, or widen CUDA_VISIBLE_DEVICES");
  }
  return make_result(CheckStatus::kPass, "gpu.visible_devices",
                     "--nproc-per-node " + std::to_string(nproc_per_node) + " fits " +
                         std::to_string(gpu.device_count) + " visible GPU(s)");
}

// gpu.nccl: the system libnccl, which matters only with GPUs.
CheckResult nccl_result(const GpuInfo& gpu) {
  if (gpu.nccl_found) {
    return make_result(CheckStatus::kPass, "gpu.nccl", "NCCL " + gpu.nccl_version + " found (libnccl.so.2)");
  }
  if (gpu.device_count > 0) {
    return make_result(CheckStatus::kWarn, "gpu.nccl", gpu.nccl_error,
                       "PyTorch wheels bundle their own NCCL, so this is only a problem for programs that load the "
                       "system one; add its directory to LD_LIBRARY_PATH");
  }
  return make_result(CheckStatus::kPass, "gpu.nccl", "not needed without GPUs (" + gpu.nccl_error + ")");
}

}  // namespace

std::vector<CheckResult> check_gpus(std::optional<int> nproc_per_node) {
  const GpuInfo gpu = probe_gpus();
  const VisibleDevicesEnv cvd = read_visible_devices_env();
  std::vector<CheckResult> out;
  out.push_back(devices_result(gpu, cvd));
  if (gpu.driver_found && gpu.driver_version > 0) out.push_back(judge_driver(gpu.driver_version, gpu.driver_release));
  if (gpu.device_count > 0 && nproc_per_node) out.push_back(nproc_fit_result(*nproc_per_node, gpu, cvd));
  out.push_back(nccl_result(gpu));
  const nlohmann::json data = gpu_data(gpu, cvd);
  for (auto& r : out) r.data = data;
  return out;
}

}  // namespace meshrun::diagnostics

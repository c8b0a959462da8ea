// Checks of this node alone (no network traffic): host name, interfaces, socket interface
// variables, local ports, GPUs. Each returns the CheckResult(s) to add to the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "diagnostics/report/check_report.hpp"

namespace meshrun::diagnostics {

/// host.name: the host name and what it resolves to; WARN when it is loopback-only and multi_node.
CheckResult check_hostname(bool multi_node, Duration timeout);

/// host.interfaces: addresses per interface and their scope; FAIL when multi_node has only loopback.
CheckResult check_interfaces(bool multi_node);

/// host.nccl_socket_ifname / host.gloo_socket_ifname, for each of the variables that is set.
std::vector<CheckResult> check_socket_ifname_env();

/// host.ports: who listens on each port; `endpoint_port` owned by meshrun-rendezvous is expected.
CheckResult check_ports(const std::vector<uint16_t>& ports, std::optional<uint16_t> endpoint_port);

/// gpu.devices, gpu.driver and gpu.visible_devices (when they apply), gpu.nccl.
std::vector<CheckResult> check_gpus(std::optional<int> nproc_per_node);

/// gpu.driver: whether a driver that runs CUDA up to `cuda_version` (cuDriverGetVersion's integer) runs
/// CUDA 13 builds, the default of PyTorch's wheels; WARN naming the release and the two ways out otherwise.
CheckResult judge_driver(int cuda_version, const std::string& release);

}  // namespace meshrun::diagnostics

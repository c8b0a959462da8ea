// The pure parts of the host checks: /proc/net/tcp parsing and port owners, interface-name rules,
// address scopes, statistics, GPU helpers, and the report format.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "common/unique_fd.hpp"
#include "diagnostics/check/gpu_probe.hpp"
#include "diagnostics/check/host_checks.hpp"
#include "diagnostics/check/port_owner.hpp"
#include "diagnostics/net/network_interfaces.hpp"
#include "diagnostics/ping/sample_stats.hpp"
#include "diagnostics/report/check_report.hpp"

using namespace meshrun;
using namespace meshrun::diagnostics;

TEST_CASE("/proc/net/tcp lines are parsed", "[ports]") {
  CHECK_FALSE(parse_proc_net_tcp_line(
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"));
  const auto v4 = parse_proc_net_tcp_line(
      "   0: 0100007F:72D8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 "
      "0000000000000000 100 0 0 10 0");
  REQUIRE(v4);
  CHECK(v4->local_address == "127.0.0.1");
  CHECK(v4->local_port == 29400);
  CHECK(v4->listening);
  CHECK(v4->inode == 123456);
  const auto v6 = parse_proc_net_tcp_line(
      "   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 01 00000000:00000000 "
      "00:00000000 00000000  1000        0 42 1 0000000000000000 20 4 30 10 -1");
  REQUIRE(v6);
  CHECK(v6->local_address == "::1");
  CHECK(v6->local_port == 8080);
  CHECK_FALSE(v6->listening);
  CHECK_FALSE(parse_proc_net_tcp_line("garbage"));
}

TEST_CASE("a port held by this process is reported with our pid", "[ports]") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd.get(), 1) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  const uint16_t port = ntohs(addr.sin_port);

  const auto listeners = find_port_listeners(port);
  REQUIRE(listeners.size() == 1);
  CHECK(listeners[0].address == "127.0.0.1");
  CHECK(listeners[0].pid == ::getpid());

  const auto r = check_ports({port}, std::nullopt);
  INFO(r.detail);
  CHECK(r.status == CheckStatus::kWarn);
  CHECK(r.detail.find("pid " + std::to_string(::getpid())) != std::string::npos);

  fd.reset();
  CHECK(find_port_listeners(port).empty());
  CHECK(check_ports({port}, std::nullopt).status == CheckStatus::kPass);
}

TEST_CASE("NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME rules", "[interfaces]") {
  const std::vector<std::string> names = {"lo", "eth0", "eth1", "docker0", "ib0"};
  CHECK(nccl_ifname_matches("eth", names) == std::vector<std::string>{"eth0", "eth1"});
  CHECK(nccl_ifname_matches("=eth", names).empty());
  CHECK(nccl_ifname_matches("=eth1", names) == std::vector<std::string>{"eth1"});
  CHECK(nccl_ifname_matches("^docker,lo", names) == std::vector<std::string>{"eth0", "eth1", "ib0"});
  CHECK(nccl_ifname_matches("ens", names).empty());
  CHECK(gloo_ifname_matches("eth1,nope0", names) == std::vector<std::string>{"eth1"});
  CHECK(gloo_ifname_matches("eth", names).empty());
}

TEST_CASE("a socket interface variable naming a missing interface fails", "[interfaces]") {
  ::setenv("NCCL_SOCKET_IFNAME", "meshrun-none0", 1);
  ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  const auto results = check_socket_ifname_env();
  ::unsetenv("NCCL_SOCKET_IFNAME");
  ::unsetenv("GLOO_SOCKET_IFNAME");
  REQUIRE(results.size() == 2);
  CHECK(results[0].name == "host.nccl_socket_ifname");
  CHECK(results[0].status == CheckStatus::kFail);
  CHECK(results[0].detail.find("meshrun-none0") != std::string::npos);
  CHECK(results[1].name == "host.gloo_socket_ifname");
  CHECK(results[1].status == CheckStatus::kPass);
}

TEST_CASE("address scopes", "[interfaces]") {
  CHECK(address_scope("127.0.1.1") == "loopback");
  CHECK(address_scope("::1") == "loopback");
  CHECK(address_scope("10.1.2.3") == "private");
  CHECK(address_scope("172.16.0.1") == "private");
  CHECK(address_scope("172.31.255.1") == "private");
  CHECK(address_scope("172.32.0.1") == "public");
  CHECK(address_scope("192.168.1.1") == "private");
  CHECK(address_scope("169.254.3.4") == "link-local");
  CHECK(address_scope("fe80::1") == "link-local");
  CHECK(address_scope("fd00::2") == "private");
  CHECK(address_scope("8.8.8.8") == "public");
  CHECK(address_scope("not-an-ip").empty());
}

TEST_CASE("ping-style statistics", "[stats]") {
  const auto s = compute_stats({1.0, 2.0, 3.0, 4.0});
  CHECK(s.count == 4);
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  CHECK(s.avg == Approx(2.5));
  CHECK(s.mdev == Approx(1.118034));
  CHECK(compute_stats({}).count == 0);
}

TEST_CASE("GPU helpers", "[gpu]") {
  CHECK(nccl_version_text(22105) == "2.21.5");
  CHECK(nccl_version_text(2708) == "2.7.8");
  CHECK(count_visible_devices("") == 0);
  CHECK(count_visible_devices("0,1,3") == 3);
  // Without a GPU this is a warning naming the CPU/Gloo fallback, never a failure.
  const auto results = check_gpus(2);
  REQUIRE_FALSE(results.empty());
  CHECK(results[0].name == "gpu.devices");
  for (const auto& r : results) CHECK(r.status != CheckStatus::kFail);
  if (results[0].data["device_count"] == 0) {
    CHECK(results[0].status == CheckStatus::kWarn);
    CHECK(results[0].detail.find("no GPU visible: CPU/Gloo will be used") != std::string::npos);
  }
}

TEST_CASE("driver release and the CUDA 13 driver floor", "[gpu]") {
  // Real /proc/driver/nvidia/version texts: the H100 machine this was first run on, and an older one.
  CHECK(parse_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 2025\n"
                             "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n") == "580.159.04");
  CHECK(parse_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build\n") ==
        "535.104.05");
  CHECK(parse_driver_release("garbage") == "");
  CHECK(cuda_version_text(13000) == "13.0");
  CHECK(cuda_version_text(12040) == "12.4");

  const auto ok = judge_driver(13000, "580.159.04");
  CHECK(ok.name == "gpu.driver");
  CHECK(ok.status == CheckStatus::kPass);
  const auto old = judge_driver(12020, "535.104.05");
  CHECK(old.status == CheckStatus::kWarn);
  CHECK(old.detail.find("535.104.05 runs CUDA up to 12.2") != std::string::npos);
  CHECK(old.detail.find("R580") != std::string::npos);
  CHECK(old.hint.find("cu126") != std::string::npos);
}

TEST_CASE("report lines and verdict", "[report]") {
  CheckReport report;
  report.add({.status = CheckStatus::kPass,
              .name = "a.ok",
              .detail = "fine",
              .hint = "",
              .data = {},
              .elapsed_ms = 1,
              .table = ""});
  report.add({.status = CheckStatus::kWarn,
              .name = "b.meh",
              .detail = "hmm",
              .hint = "look",
              .data = {},
              .elapsed_ms = 1,
              .table = "    a table\n"});
  CHECK(report.exit_code() == 0);
  CHECK(report.verdict() == CheckStatus::kWarn);
  report.add({.status = CheckStatus::kFail,
              .name = "c.bad",
              .detail = "broken",
              .hint = "fix it",
              .data = {},
              .elapsed_ms = 1,
              .table = ""});
  CHECK(report.exit_code() == 1);
  const std::string text = report.to_text();
  CHECK(text.find("PASS a.ok: fine\n") != std::string::npos);
  CHECK(text.find("WARN b.meh: hmm (look)\n    a table\nFAIL c.bad") != std::string::npos);
  CHECK(text.find("WARN b.meh: hmm (look)\n") != std::string::npos);
  CHECK(text.find("FAIL c.bad: broken (fix it)\n") != std::string::npos);
  CHECK(text.find("verdict: FAIL") != std::string::npos);
  const auto j = report.to_json();
  CHECK(j["verdict"] == "FAIL");
  CHECK(j["counts"]["warn"] == 1);
  CHECK(j["checks"][2]["name"] == "c.bad");
}

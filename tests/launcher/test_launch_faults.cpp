// meshrun agents losing each other on loopback (no namespaces needed): a dead rendezvous host, and a dead
// node that leaves fewer than the minimum. tests/cluster repeats these across network namespaces.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <random>

#include "support/subprocess.hpp"

using meshrun::testing::Process;
using meshrun::testing::read_file;
using meshrun::testing::TempDir;
using meshrun::testing::unique_marker;
using meshrun::testing::wait_for_file;
using meshrun::testing::wait_for_hosted_endpoint;

namespace {

const std::string kMeshrun = MESHRUN_BIN;
const std::string kWorker = TEST_WORKER_BIN;

// One agent of a 2-node job of `wait` workers; is_host picks who serves the rendezvous.
std::vector<std::string> agent(const std::string& endpoint, const std::string& run_id, const std::string& nnodes,
                               bool is_host, const std::string& dir) {
  return {kMeshrun,
          "--nnodes",
          nnodes,
          "--nproc-per-node",
          "2",
          "--rdzv-backend",
          "c10d",
          "--rdzv-endpoint",
          endpoint,
          "--rdzv-id",
          run_id,
          "--rdzv-conf",
          std::string("is_host=") + (is_host ? "1" : "0"),
          "--shutdown-timeout",
          "2",
          "--max-restarts",
          "2",
          kWorker,
          "wait",
          dir};
}

void wait_for_workers(const std::string& dir, int n) {
  for (int r = 0; r < n; ++r) REQUIRE(wait_for_file(dir + "/pid." + std::to_string(r)));
}

}  // namespace

TEST_CASE("the rendezvous host dying stops every other agent, which names the endpoint", "[launch][faults]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process host(agent("127.0.0.1:0", "host-dies", "2", true, dir.path()), {marker}, dir.path() + "/out.host");
  const std::string endpoint = wait_for_hosted_endpoint(host);
  REQUIRE(!endpoint.empty());
  Process other(agent(endpoint, "host-dies", "2", false, dir.path()), {marker}, dir.path() + "/out.other");
  wait_for_workers(dir.path(), 4);
  const auto t0 = std::chrono::steady_clock::now();
  host.signal(SIGKILL);
  CHECK(host.wait() == 137);
  const int code = other.wait(std::chrono::seconds(60));  // safety net; detection takes about 3-4 s
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(other.output());
  WARN("agent exited " << seconds << " s after the rendezvous host was killed");
  CHECK(code == 1);
  CHECK_THAT(other.output(), Catch::Contains("lost the rendezvous at " + endpoint));
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("a dead node that leaves fewer than the minimum fails the run, naming the node", "[launch][faults]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process host(agent("127.0.0.1:0", "below-min", "2", true, dir.path()), {marker}, dir.path() + "/out.host");
  const std::string endpoint = wait_for_hosted_endpoint(host);
  REQUIRE(!endpoint.empty());
  Process other(agent(endpoint, "below-min", "2", false, dir.path()), {marker}, dir.path() + "/out.other");
  wait_for_workers(dir.path(), 4);
  const pid_t victim = other.pid();
  other.signal(SIGKILL);
  CHECK(other.wait() == 137);
  const int code = host.wait(std::chrono::seconds(60));
  INFO(host.output());
  CHECK(code == 1);
  CHECK_THAT(host.output(), Catch::Contains("(pid " + std::to_string(victim) + ") is dead"));
  CHECK_THAT(host.output(), Catch::Contains("fewer than the minimum of 2"));
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("with MIN:MAX a dead node is dropped and the others restart without it", "[launch][faults]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process host(agent("127.0.0.1:0", "elastic", "1:2", true, dir.path()), {marker}, dir.path() + "/out.host");
  const std::string endpoint = wait_for_hosted_endpoint(host);
  REQUIRE(!endpoint.empty());
  Process other(agent(endpoint, "elastic", "1:2", false, dir.path()), {marker}, dir.path() + "/out.other");
  wait_for_workers(dir.path(), 4);
  other.signal(SIGKILL);
  CHECK(other.wait() == 137);
  // The survivor restarts alone: ranks 0 and 1 of a world of 2 write new pid files.
  for (int r = 0; r < 2; ++r) std::remove((dir.path() + "/pid." + std::to_string(r)).c_str());
  const bool restarted = wait_for_file(dir.path() + "/pid.0") && wait_for_file(dir.path() + "/pid.1");
  INFO(host.output());
  CHECK(restarted);
  CHECK_THAT(host.output(), Catch::Contains("is dead: no heartbeat"));
  host.signal(SIGTERM);
  CHECK(host.wait() == 143);
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

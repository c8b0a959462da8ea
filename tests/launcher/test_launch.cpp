// meshrun end to end: real launcher processes, real workers, loopback only.

#include <catch2/catch.hpp>
#include <csignal>
#include <map>
#include <random>
#include <set>

#include "support/subprocess.hpp"

using meshrun::testing::Process;
using meshrun::testing::read_file;
using meshrun::testing::TempDir;
using meshrun::testing::unique_marker;
using meshrun::testing::wait_for_file;

namespace {

const std::string kMeshrun = MESHRUN_BIN;
const std::string kWorker = TEST_WORKER_BIN;

std::map<std::string, std::string> read_env_file(const std::string& path) {
  std::map<std::string, std::string> m;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

std::vector<std::string> meshrun_cmd(std::vector<std::string> args) {
  args.insert(args.begin(), kMeshrun);
  return args;
}

}  // namespace

TEST_CASE("env contract for 1 and 4 workers", "[launch]") {
  for (int n : {1, 4}) {
    DYNAMIC_SECTION(n << " workers") {
      TempDir dir;
      auto [code, out] = meshrun::testing::run(
          meshrun_cmd({"--standalone", "--nproc-per-node", std::to_string(n), "--max-restarts", "1", "--role",
                       "trainer", kWorker, "env", dir.path(), "--worker-flag", "x"}),
          {}, dir.path() + "/out");
      INFO(out);
      REQUIRE(code == 0);
      std::string run_id, master_port;
      for (int r = 0; r < n; ++r) {
        const auto env = read_env_file(dir.path() + "/env." + std::to_string(r));
        CHECK(env.at("RANK") == std::to_string(r));
        CHECK(env.at("LOCAL_RANK") == std::to_string(r));
        CHECK(env.at("WORLD_SIZE") == std::to_string(n));
        CHECK(env.at("LOCAL_WORLD_SIZE") == std::to_string(n));
        CHECK(env.at("GROUP_RANK") == "0");
        CHECK(env.at("GROUP_WORLD_SIZE") == "1");
        CHECK(env.at("ROLE_RANK") == std::to_string(r));
        CHECK(env.at("ROLE_WORLD_SIZE") == std::to_string(n));
        CHECK(env.at("ROLE_NAME") == "trainer");
        CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
        CHECK(std::stoi(env.at("MASTER_PORT")) > 0);
        CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "0");
        CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "1");
        CHECK_FALSE(env.at("TORCHELASTIC_RUN_ID").empty());
        CHECK(env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
        CHECK_THAT(env.at("TORCHELASTIC_ERROR_FILE"), Catch::EndsWith("error.json"));
        CHECK(env.count("MESHRUN_RDZV_ENDPOINT") == 1);
        CHECK(env.count("OMP_NUM_THREADS") == (n > 1 ? 1u : 0u));
        CHECK(env.at("ARGS") == "--worker-flag x");
        if (r == 0) {
          run_id = env.at("TORCHELASTIC_RUN_ID");
          master_port = env.at("MASTER_PORT");
        }
        CHECK(env.at("TORCHELASTIC_RUN_ID") == run_id);
        CHECK(env.at("MASTER_PORT") == master_port);
      }
    }
  }
}

TEST_CASE("two launchers form one job of two nodes", "[launch]") {
  TempDir dir;
  const auto args = [&](const std::string& endpoint, bool is_host) {
    return meshrun_cmd({"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                        "--rdzv-conf", is_host ? "is_host=1" : "is_host=0", "--rdzv-id", "two-nodes", kWorker, "env",
                        dir.path()});
  };
  Process a(args("127.0.0.1:0", true), {}, dir.path() + "/out.a");
  const std::string endpoint = meshrun::testing::wait_for_hosted_endpoint(a);
  REQUIRE(!endpoint.empty());
  Process b(args(endpoint, false), {}, dir.path() + "/out.b");
  const int code_a = a.wait();
  const int code_b = b.wait();
  INFO(a.output() << b.output());
  CHECK(code_a == 0);
  CHECK(code_b == 0);
  std::set<std::string> group_ranks;
  std::string port;
  for (int r = 0; r < 4; ++r) {
    const auto env = read_env_file(dir.path() + "/env." + std::to_string(r));
    REQUIRE(env.count("RANK") == 1);
    CHECK(env.at("WORLD_SIZE") == "4");
    CHECK(env.at("GROUP_WORLD_SIZE") == "2");
    CHECK(env.at("LOCAL_RANK") == std::to_string(r % 2));
    group_ranks.insert(env.at("GROUP_RANK"));
    if (port.empty()) port = env.at("MASTER_PORT");
    CHECK(env.at("MASTER_PORT") == port);  // one store for the whole job
  }
  CHECK(group_ranks == std::set<std::string>{"0", "1"});
}

TEST_CASE("a failing worker stops the others, its code is the job's, the summary names it", "[launch]") {
  TempDir dir;
  const std::string marker = unique_marker();
  auto [code, out] = meshrun::testing::run(
      meshrun_cmd({"--standalone", "--nproc-per-node", "4", kWorker, "fail-rank", "2", "3", dir.path()}), {marker},
      dir.path() + "/out");
  INFO(out);
  CHECK(code == 3);
  CHECK_THAT(out, Catch::Contains("rank:       2 (local rank 2"));
  CHECK_THAT(out, Catch::Contains("exit code 3"));
  CHECK_THAT(out, Catch::Contains("about to fail on purpose"));
  // The others were up when rank 2 failed (it waits for them), and the launcher stopped them with SIGTERM.
  for (int r : {0, 1, 3}) CHECK(read_file(dir.path() + "/got." + std::to_string(r)) == std::to_string(SIGTERM) + "\n");
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("flag --max-restarts restarts the group, success on a restart ends with 0", "[launch]") {
  TempDir dir;
  SECTION("succeeds on restart 1") {
    auto [code, out] = meshrun::testing::run(meshrun_cmd({"--standalone", "--nproc-per-node", "3", "--max-restarts",
                                                          "2", kWorker, "fail-until", "1", "1", "3"}),
                                             {}, dir.path() + "/out");
    INFO(out);
    CHECK(code == 0);
    CHECK_THAT(out, Catch::Contains("restart 1 of 2"));
  }
  SECTION("still failing after two restarts: exit code of the worker") {
    auto [code, out] = meshrun::testing::run(meshrun_cmd({"--standalone", "--nproc-per-node", "2", "--max-restarts",
                                                          "2", kWorker, "fail-until", "9", "0", "5"}),
                                             {}, dir.path() + "/out");
    INFO(out);
    CHECK(code == 5);
    CHECK_THAT(out, Catch::Contains("attempt 2"));
    CHECK_THAT(out, Catch::Contains("giving up after 2 restart"));
  }
}

TEST_CASE("SIGTERM to the launcher reaches every worker, nothing survives, exit 143", "[launch]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process launcher(meshrun_cmd({"--standalone", "--nproc-per-node", "3", kWorker, "wait", dir.path()}), {marker},
                   dir.path() + "/out");
  for (int r = 0; r < 3; ++r) REQUIRE(wait_for_file(dir.path() + "/pid." + std::to_string(r)));
  launcher.signal(SIGTERM);
  const int code = launcher.wait();
  INFO(launcher.output());
  CHECK(code == 143);
  for (int r = 0; r < 3; ++r) {
    const std::string got = dir.path() + "/got." + std::to_string(r);
    REQUIRE(meshrun::testing::file_exists(got));
    CHECK(std::stoi(read_file(got)) == SIGTERM);
  }
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("SIGUSR1 is forwarded and the job goes on", "[launch]") {
  TempDir dir;
  Process launcher(meshrun_cmd({"--standalone", "--nproc-per-node", "2", kWorker, "wait", dir.path()}), {},
                   dir.path() + "/out");
  for (int r = 0; r < 2; ++r) REQUIRE(wait_for_file(dir.path() + "/pid." + std::to_string(r)));
  launcher.signal(SIGUSR1);
  const int code = launcher.wait();  // the workers record the signal and exit 0
  INFO(launcher.output());
  CHECK(code == 0);
  for (int r = 0; r < 2; ++r) CHECK(std::stoi(read_file(dir.path() + "/got." + std::to_string(r))) == SIGUSR1);
}

TEST_CASE("kill -9 of the launcher takes its workers with it", "[launch]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process launcher(meshrun_cmd({"--standalone", "--nproc-per-node", "3", kWorker, "wait", dir.path()}), {marker},
                   dir.path() + "/out");
  std::vector<pid_t> workers;
  for (int r = 0; r < 3; ++r) {
    const std::string pidfile = dir.path() + "/pid." + std::to_string(r);
    REQUIRE(wait_for_file(pidfile));
    workers.push_back(std::stoi(read_file(pidfile)));
  }
  for (pid_t w : workers) CHECK(meshrun::testing::process_alive(w));
  launcher.signal(SIGKILL);
  CHECK(launcher.wait() == 137);
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

// The workers' own children: one in the worker's process group, one in a session of its own (setsid).
std::vector<pid_t> grandchildren(const std::string& dir, int workers) {
  std::vector<pid_t> pids;
  for (int r = 0; r < workers; ++r) {
    for (const std::string kind : {"child.", "session_child."}) {
      const std::string pidfile = dir + "/" + kind + std::to_string(r);
      REQUIRE(wait_for_file(pidfile));
      REQUIRE(std::stoi(read_file(pidfile)) > 0);
      pids.push_back(std::stoi(read_file(pidfile)));
    }
  }
  return pids;
}

TEST_CASE("kill -9 of the launcher takes its workers' children with it, a setsid child too", "[launch][orphans]") {
  TempDir dir;
  const std::string marker = unique_marker();
  Process launcher(
      meshrun_cmd({"--standalone", "--nproc-per-node", "2", "--no-python", SPAWN_GRANDCHILDREN, dir.path(), "wait"}),
      {marker}, dir.path() + "/out");
  const auto children = grandchildren(dir.path(), 2);
  for (pid_t c : children) CHECK(meshrun::testing::process_alive(c));
  launcher.signal(SIGKILL);
  CHECK(launcher.wait() == 137);
  INFO(launcher.output());
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
  for (pid_t c : children) CHECK_FALSE(meshrun::testing::process_alive(c));
}

TEST_CASE("workers that exit leave nothing running: their children are stopped with the attempt", "[launch][orphans]") {
  TempDir dir;
  const std::string marker = unique_marker();
  auto [code, out] = meshrun::testing::run(
      meshrun_cmd({"--standalone", "--nproc-per-node", "2", "--no-python", SPAWN_GRANDCHILDREN, dir.path(), "exit"}),
      {marker}, dir.path() + "/out");
  INFO(out);
  CHECK(code == 0);
  const auto children = grandchildren(dir.path(), 2);
  CHECK(meshrun::testing::processes_with_env(marker).empty());  // meshrun swept (and saw them gone) before it returned
  for (pid_t c : children) CHECK_FALSE(meshrun::testing::process_alive(c));
}

TEST_CASE("bad flags: a message naming the option, exit 2", "[launch]") {
  TempDir dir;
  for (const auto& args : std::vector<std::vector<std::string>>{{"--nproc-per-node", "x", "prog"},
                                                                {"--no-such-flag", "prog"},
                                                                {"--standalone", "--nnodes", "3", "prog"},
                                                                {"--module", "--no-python", "prog"},
                                                                {"--nproc_per_node"}}) {
    auto [code, out] = meshrun::testing::run(meshrun_cmd(args), {}, dir.path() + "/out");
    INFO(args.front() << ": " << out);
    CHECK(code == 2);
    CHECK_THAT(out, Catch::Contains("meshrun: error:"));
  }
  auto [code, out] = meshrun::testing::run(meshrun_cmd({"--standalone", "/no/such/program"}), {}, dir.path() + "/out");
  CHECK(code == 127);
  CHECK_THAT(out, Catch::Contains("/no/such/program"));
}

TEST_CASE("flag --duplicate-stdout-filters copies matching lines of every rank to the attempt's file", "[launch]") {
  TempDir dir;
  auto [code, out] = meshrun::testing::run(
      meshrun_cmd({"--standalone", "--nproc-per-node", "2", "--log-dir", dir.path() + "/logs",
                   "--duplicate-stdout-filters", "loss,,", "--redirects", "1", "--no-python", "/bin/sh", "-c",
                   "echo step-$RANK; echo loss, $RANK; echo other loss $RANK >&2"}),
      {}, dir.path() + "/out");
  INFO(out);
  REQUIRE(code == 0);
  auto [c, path] = meshrun::testing::run(
      {"/bin/sh", "-c", "ls " + dir.path() + "/logs/*/attempt_0/filtered_stdout.log"}, {}, dir.path() + "/ls");
  REQUIRE(c == 0);
  const std::string filtered = read_file(path.substr(0, path.find('\n')));
  // The filter is "loss," (",," is a comma); stdout only; every rank, even with stdout kept off the console.
  CHECK_THAT(filtered, Catch::Contains("[rank0]:loss, 0\n") && Catch::Contains("[rank1]:loss, 1\n"));
  CHECK_THAT(filtered, !Catch::Contains("step") && !Catch::Contains("other"));
}

TEST_CASE("flag --log-dir keeps per-attempt, per-rank files, --redirects keeps them off the console", "[launch]") {
  TempDir dir;
  auto [code, out] = meshrun::testing::run(
      meshrun_cmd({"--standalone", "--rdzv-id", "ignored", "--nproc-per-node", "2", "--log-dir", dir.path() + "/logs",
                   "--redirects", "0:2", "--no-python", "/bin/sh", "-c", "echo out-$RANK; echo err-$RANK >&2"}),
      {}, dir.path() + "/out");
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("[rank0]:out-0"));
  CHECK_THAT(out, Catch::Contains("[rank1]:err-1"));
  CHECK_THAT(out, !Catch::Contains("err-0"));  // local rank 0's stderr is redirected
  const std::string found = [&] {
    auto [c, o] =
        meshrun::testing::run({"/bin/sh", "-c", "ls -d " + dir.path() + "/logs/*/attempt_0/0"}, {}, dir.path() + "/ls");
    return c == 0 ? o.substr(0, o.find('\n')) : std::string();
  }();
  REQUIRE_FALSE(found.empty());
  CHECK(read_file(found + "/stdout.log") == "out-0\n");
  CHECK(read_file(found + "/stderr.log") == "err-0\n");
}

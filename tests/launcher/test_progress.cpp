// Progress beats end to end: real PyTorch (Gloo) workers beating through MESHRUN_PROGRESS under meshrun.
// A stopped worker and a blocked one are found hung, named and stopped (the blocked one with its stack);
// a long first step, a long checkpoint phase and a rank without beats are not; a slow rank is named a
// straggler in the daemon's status. Timings are printed (WARN), never asserted.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "support/daemon_process.hpp"
#include "support/subprocess.hpp"

using meshrun::testing::DaemonProcess;
using meshrun::testing::file_exists;
using meshrun::testing::Process;
using meshrun::testing::read_file;
using meshrun::testing::TempDir;

namespace {

const std::string kVenv = VENV_BIN;

// meshrun on one node running progress_job.py with `job_args`; `meshrun_args` go before the script.
std::vector<std::string> job(const std::vector<std::string>& meshrun_args, const std::vector<std::string>& job_args) {
  std::vector<std::string> argv = {MESHRUN_BIN, "--nproc-per-node", "2"};
  argv.insert(argv.end(), meshrun_args.begin(), meshrun_args.end());
  argv.push_back(PROGRESS_JOB);
  argv.insert(argv.end(), job_args.begin(), job_args.end());
  return argv;
}

std::vector<std::string> job_env(const TempDir& dir) {
  const char* path = std::getenv("PATH");
  return {"PATH=" + kVenv + ":" + (path ? path : "/usr/bin:/bin"), "PROGRESS_JOB_OUT=" + dir.path()};
}

// The run's failures in the daemon's status (empty while it has none, or after the run is gone).
nlohmann::json run_failures(const std::string& endpoint, const std::string& run_id, const std::string& scratch) {
  const auto [code, text] =
      meshrun::testing::run({DAEMON_BIN, "status", "--endpoint", endpoint, "--json"}, {}, scratch);
  const auto status = nlohmann::json::parse(text, nullptr, false);
  if (code != 0 || !status.is_object()) return nlohmann::json::array();
  for (const auto& run : status.value("runs", nlohmann::json::array())) {
    if (run.value("run_id", "") == run_id) return run.value("failures", nlohmann::json::array());
  }
  return nlohmann::json::array();
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("a worker stopped by SIGSTOP is named hung, not the rank waiting for it, and the job restarts",
          "[progress][hang]") {
  REQUIRE(file_exists(kVenv + "/python"));
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  Process p(job({"--standalone", "--hang-floor", "2", "--shutdown-timeout", "2", "--max-restarts", "1"},
                {"60", "0.05", "--stop-rank", "1", "--stop-at", "5"}),
            job_env(dir), dir.path() + "/out");
  const int code = p.wait(std::chrono::seconds(120));
  const std::string out = p.output();
  INFO(out);
  WARN("stopped worker: named, and the restarted job done " << since(t0) << " s after the start (steps of 0.05 s)");
  // Attempt 1 (a fresh workers' store: no Gloo address of attempt 0 is read) runs to the end.
  CHECK(code == 0);
  CHECK(read_file(dir.path() + "/done.0") == "1");
  CHECK(read_file(dir.path() + "/done.1") == "1");
  CHECK_THAT(out, Catch::Contains("restarting the workers (restart 1 of 1)"));
  CHECK_THAT(out, Catch::Contains("meshrun: worker hung (first failure, attempt 0)"));
  CHECK_THAT(out, Catch::Contains("rank:       1 (local rank 1"));
  CHECK_THAT(out, Catch::Contains("stopped by a signal (state T)"));
  // The suspicion names the stopped rank and where it stopped, whichever route noticed first (its stopped
  // budget, rank 0's silence, or rank 0's wait in the collective: a stopped worker is preferred to a waiting one,
  // and its own frozen hook's last status is not read as a wait).
  CHECK_THAT(out, Catch::Contains("meshrun: suspected hang: rank 1: stopped by a signal (state T) for "));
  CHECK_THAT(out, Catch::Contains(" after step 5 (train)"));
  CHECK_THAT(out, Catch::Contains("hang: rank 1 (") && Catch::Contains(") is stopped by a signal (state T); rank 0 "
                                                                       "waits in all_reduce #"));
  CHECK_THAT(out, Catch::Contains("stack (py-spy)"));
}

TEST_CASE("a worker blocked forever is named hung with its Python stack, and the job fails", "[progress][hang]") {
  REQUIRE(file_exists(kVenv + "/py-spy"));  // scripts/setup.sh installs it
  TempDir dir;
  Process p(job({"--standalone", "--hang-timeout", "3", "--shutdown-timeout", "2"},
                {"40", "0.05", "--block-rank", "0", "--block-at", "4"}),
            job_env(dir), dir.path() + "/out");
  const int code = p.wait(std::chrono::seconds(120));
  const std::string out = p.output();
  INFO(out);
  CHECK(code == 1);
  CHECK_THAT(out, Catch::Contains("meshrun: worker hung (first failure, attempt 0)"));
  CHECK_THAT(out, Catch::Contains("rank:       0 (local rank 0"));
  CHECK_THAT(out, Catch::Contains("no progress beat for"));
  CHECK_THAT(out, Catch::Contains("(budget 3.0 s) after step 3 (train)"));
  CHECK_THAT(out, Catch::Contains("stack (py-spy)"));
  CHECK_THAT(out, Catch::Contains("block_forever"));
}

TEST_CASE("no false alarm: a slow first step, a long checkpoint phase, a rank without beats", "[progress][hang]") {
  TempDir dir;
  // Automatic budget: floor 2 s + 2 x 0.05 s. The first step takes 4 s (before warm-up: not judged), the
  // checkpoint phase 4 s (phase budget: 1800 s), and rank 1 never beats. (A 1 s floor was short of the silence
  // between the last beat and the end of a job on a loaded machine.)
  Process p(job({"--standalone", "--hang-floor", "2"}, {"30", "0.05", "--first-step-s", "4", "--checkpoint-at", "10",
                                                        "--checkpoint-s", "4", "--silent-rank", "1"}),
            job_env(dir), dir.path() + "/out");
  const int code = p.wait(std::chrono::seconds(120));
  const std::string out = p.output();
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(out, !Catch::Contains("hung"));
  CHECK(read_file(dir.path() + "/done.0") == "0");
  CHECK(read_file(dir.path() + "/done.1") == "0");
}

TEST_CASE("a rank that computes twice as long per step is named a straggler in status", "[progress][straggler]") {
  TempDir dir;
  const DaemonProcess daemon(DAEMON_BIN, {"--log-level", "warn"}, dir.path() + "/daemon");
  const std::string endpoint = daemon.endpoint();
  const auto t0 = std::chrono::steady_clock::now();
  Process p(job({"--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "slow"},
                {"400", "0.05", "--slow-rank", "1", "--slow-factor", "2"}),
            job_env(dir), dir.path() + "/out");
  // Poll the daemon's status (JSON) until a rank is flagged; the job runs long enough for the window.
  nlohmann::json flagged;
  while (flagged.is_null() && since(t0) < 90) {
    const auto [code, text] =
        meshrun::testing::run({DAEMON_BIN, "status", "--endpoint", endpoint, "--json"}, {}, dir.path() + "/st");
    const auto status = nlohmann::json::parse(text, nullptr, false);
    if (code == 0 && status.is_object()) {
      for (const auto& run : status.value("runs", nlohmann::json::array())) {
        for (const auto& node : run.value("nodes", nlohmann::json::array())) {
          for (const auto& r : node.value("ranks", nlohmann::json::array())) {
            if (r.value("straggler", false)) flagged = r;
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  WARN("straggler named after " << since(t0) << " s (steps of 0.05 s, rank 1 at 0.1 s)");
  INFO(p.output());
  REQUIRE(flagged.is_object());
  CHECK(flagged.at("rank") == 1);
  CHECK(flagged.at("compute_s").get<double>() > 0.09);
  CHECK(flagged.at("step").get<int>() > 0);
  CHECK(flagged.at("loss").get<double>() > 0);
  p.signal(SIGTERM);
  p.wait(std::chrono::seconds(60));
  CHECK_THAT(p.output(), Catch::Contains("straggler: rank 1 on"));
}

TEST_CASE("a rank that raises on node 1 is named the root cause by both nodes, with its traceback",
          "[progress][rootcause]") {
  TempDir dir;
  const DaemonProcess daemon(DAEMON_BIN, {"--log-level", "warn"}, dir.path() + "/daemon");
  const std::string endpoint = daemon.endpoint();
  const auto node = [&](int node_rank) {
    return job({"--nnodes", "2", "--node-rank", std::to_string(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint",
                endpoint, "--rdzv-id", "rootcause", "--shutdown-timeout", "2"},
               {"1000", "0.05", "--raise-rank", "3", "--raise-at", "5"});
  };
  Process node0(node(0), job_env(dir), dir.path() + "/node0");
  Process node1(node(1), job_env(dir), dir.path() + "/node1");
  // While the run is there: the daemon's status lists the failures, the root cause first.
  nlohmann::json failures = nlohmann::json::array();
  const auto t0 = std::chrono::steady_clock::now();
  while (failures.empty() && since(t0) < 90) {
    failures = run_failures(endpoint, "rootcause", dir.path() + "/st");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int code1 = node1.wait(std::chrono::seconds(120));
  const int code0 = node0.wait(std::chrono::seconds(120));
  const std::string out0 = node0.output();
  const std::string out1 = node1.output();
  INFO("node 0:\n" << out0 << "\nnode 1:\n" << out1);
  REQUIRE(!failures.empty());
  CHECK(failures[0].at("rank") == 3);
  CHECK(failures[0].at("error") == "RuntimeError: rank 3 failed on purpose in step 5");
  CHECK(code0 != 0);
  CHECK(code1 != 0);
  for (const auto* out : {&out0, &out1}) {
    const auto at = out->find("meshrun: root cause (the first of ");
    REQUIRE(at != std::string::npos);
    const std::string block = out->substr(at);
    CHECK_THAT(block, Catch::Contains("\n  rank 3 on "));
    CHECK_THAT(block, Catch::Contains("exit code 1"));
    CHECK_THAT(block, Catch::Contains("error: RuntimeError: rank 3 failed on purpose in step 5"));
    CHECK_THAT(block, Catch::Contains("in fail_on_purpose"));  // its innermost frame
  }
}

// Copies in memory (checkpoint.memory_interval) with the real meshrun and meshrun-trainer (tiny config, CPU,
// Gloo): no storage checkpoint exists in these runs, so a restart that does not restore from the agents'
// memory starts again at step 1. A worker killed after a step restores the newest committed copy from its
// own agent; one killed halfway through its copy leaves the step before standing; and the copy runs beside
// the next step, not on the training thread (shown by the order of events, with the copy stalled).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "tests/trainer/process_runner.hpp"

using namespace meshrun::testing;

namespace {

constexpr int kInterval = 4;

std::vector<std::string> memory_run(const std::string& dir) {
  return {"train.steps=20",
          "train.seq_len=32",
          "train.log_interval=1",
          "checkpoint.dir=" + q(dir + "/ck"),
          "checkpoint.interval=0",
          "checkpoint.save_final=false",
          "checkpoint.memory_interval=" + std::to_string(kInterval)};
}

const std::vector<std::string> kOneRestart = {"--standalone", "--max-restarts", "1"};

// The same job under meshrun with no fault: the losses every restored run must reproduce.
const std::map<int64_t, double>& reference_losses() {
  static const std::map<int64_t, double> losses = [] {
    const std::string dir = make_temp_dir();
    LauncherJob job(dir, 2, memory_run(dir), {}, kOneRestart);
    const int code = job.wait();
    INFO(job.output());
    REQUIRE(code == 0);
    return read_step_losses(dir);
  }();
  return losses;
}

struct Restored {
  std::string output;
  std::map<int64_t, double> losses;  // the second attempt's (metrics.jsonl starts afresh per attempt)
};

Restored run_with_fault(const std::string& variable, const std::string& value) {
  const std::string dir = make_temp_dir();
  LauncherJob job(dir, 2, memory_run(dir), {{variable, value}}, kOneRestart);
  const int code = job.wait();
  Restored r{job.output(), read_step_losses(dir)};
  INFO(r.output);
  REQUIRE(code == 0);
  return r;
}

}  // namespace

TEST_CASE("memory: a worker killed after step 14 restores step 12 from its own agent", "[memory][own]") {
  const auto& reference = reference_losses();
  const Restored r = run_with_fault("MESHRUN_TRAINER_FAULT_KILL_AFTER_STEP", "14:1");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("restored step 12 from memory (every rank from its own agent)"));
  REQUIRE(!r.losses.empty());
  CHECK(r.losses.begin()->first == 13);  // 14 - 12 = 2 steps done again, at most the interval
  const auto [diff, n] = compare(r.losses, reference, 13);
  CHECK(n == 8);
  CHECK(diff == 0);  // the same bytes, the same transport: the same losses
}

TEST_CASE("memory: a worker killed halfway through its copy of step 12 leaves step 8 standing", "[memory][torn]") {
  const auto& reference = reference_losses();
  const Restored r = run_with_fault("MESHRUN_TRAINER_FAULT_KILL_IN_MEMORY_COPY", "12:1");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("restored step 8 from memory"));
  REQUIRE(!r.losses.empty());
  CHECK(r.losses.begin()->first == 9);
  const auto [diff, n] = compare(r.losses, reference, 9);
  CHECK(n == 12);
  CHECK(diff == 0);
}

TEST_CASE("memory: the copy runs beside the next step, not on the training thread", "[memory][overlap]") {
  // Rank 0's copy of step 8 stalls 1 s halfway. Copied on the training thread, it would be sealed while step 8
  // is still the current one; beside training, step 9 has started (and waits for it before its update).
  const auto& reference = reference_losses();
  const std::string dir = make_temp_dir();
  LauncherJob job(dir, 2, memory_run(dir), {{"MESHRUN_TRAINER_FAULT_STALL_IN_MEMORY_COPY", "8:0:1"}}, kOneRestart);
  const int code = job.wait();
  INFO(job.output());
  REQUIRE(code == 0);
  const auto copies = read_events(dir, "memory_copy");
  REQUIRE(copies.size() == 4);  // steps 4, 8, 12, 16
  for (const auto& copy : copies) {
    INFO(copy.dump());
    CHECK(copy["committed"] == true);
    CHECK(copy["skipped"] == "");
    CHECK(copy["bytes"].get<int64_t>() > 0);
  }
  CHECK(copies[1]["step"] == 8);
  CHECK(copies[1]["sealed_during_step"].get<int64_t>() >= 9);
  const auto [diff, n] = compare(read_step_losses(dir), reference, 1);
  CHECK(n == 20);
  CHECK(diff == 0);  // the stalled copy changed nothing
}

TEST_CASE("memory: without meshrun the key says so and training goes on", "[memory][off]") {
  const std::string dir = make_temp_dir();
  const auto run = run_workers_in(dir, 2, memory_run(dir));
  INFO(run.describe());
  REQUIRE(run.ok());
  CHECK_THAT(run.outputs[0], Catch::Contains("checkpoint.memory_interval needs meshrun (MESHRUN_MEMORY is unset)"));
  CHECK(read_step_losses(dir).size() == 20);
}

// Copies in memory (checkpoint.memory_interval) with the real meshrun and meshrun-trainer (tiny config, CPU,
// Gloo): no storage checkpoint exists in these runs, so a restart that does not restore from the agents'
// memory starts again at step 1. A worker killed after a step restores the newest committed copy from its
// own agent; one killed halfway through its copy leaves the step before standing; and the copy runs beside
// the next step, not on the training thread (shown by the order of events, with the copy stalled). A copy at every
// step skips every other one, and says so once per rank, with the count at the end.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <regex>
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

TEST_CASE("memory: a copy at every step skips every other one, said once per rank and counted at the end",
          "[memory][every]") {
  // checkpoint.memory_interval=1, a value the docs allow: the agent's two slots still hold the newest committed and
  // the newest durable copy when the next step's copy asks for one, so every other copy is skipped. That is said
  // once per rank (then at most every few minutes), with the fix, and counted in the run's summary.
  const std::string dir = make_temp_dir();
  const auto started = std::chrono::steady_clock::now();
  LauncherJob job(dir, 2, with(memory_run(dir), {"train.steps=40", "checkpoint.memory_interval=1"}), {}, kOneRestart);
  const int code = job.wait();
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60;
  const std::string out = job.output();
  INFO(out);
  REQUIRE(code == 0);
  // What rank 0's copies did, from its memory_copy events: the counts the summary must say.
  int64_t skipped = 0;
  int64_t incomplete = 0;
  const auto copies = read_events(dir, "memory_copy");
  for (const auto& copy : copies) {
    skipped += copy["skipped"] != "" ? 1 : 0;
    incomplete += copy["committed"] == false ? 1 : 0;
  }
  REQUIRE(skipped >= 2);  // the condition recurred: otherwise saying it once would prove nothing
  const auto count = [&](const std::string& pattern) {
    const std::regex re(pattern);
    return std::distance(std::sregex_iterator(out.begin(), out.end(), re), std::sregex_iterator());
  };
  const auto allowed = static_cast<long>(std::ceil(minutes));  // one line per rank per minute, at most
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    CHECK(count("rank " + r + " made no copy in memory of step") <= allowed);
    CHECK(count("rank " + r +
                " made no copy in memory of step [0-9]+: the agent lent no slot: every slot holds a "
                "copy that must stay.*checkpoint.memory_interval=2 or more") == 1);  // the reason and the fix
    CHECK(count("rank " + r + " made no copy in memory at [0-9]+ of [0-9]+ copy steps") == 1);
  }
  CHECK(count("rank 0 made no copy in memory at " + std::to_string(skipped) + " of " + std::to_string(copies.size()) +
              " copy steps \\(" + std::to_string(skipped) +
              " of them because every slot held a copy that must stay\\)") == 1);
  CHECK(count("is not complete on every rank") <= allowed);
  CHECK(count(std::to_string(incomplete) + " copies in memory were not complete on every rank") == 1);
}

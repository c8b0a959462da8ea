// Checkpoints with real worker processes (tiny config, CPU, Gloo, the real meshrun-rendezvous / meshrun):
// exact resume, resharding on load across world sizes, strategies and formats, refusal of damaged
// checkpoints naming the file, a rank killed mid-save, keep_last, preemption through meshrun, background
// (checkpoint.async) saves, and a rank's failed write stopping every rank.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/trainer/process_runner.hpp"

using namespace meshrun::testing;
namespace fs = std::filesystem;

namespace {

// 40 steps with checkpoints at 20 and 40; the LR schedule spans all 40 in every run.
const std::vector<std::string> kRun = {"train.steps=40", "train.seq_len=32", "train.global_batch_size=8",
                                       "train.log_interval=100", "checkpoint.interval=20"};

std::string step_dir(const std::string& ck, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08d", step);
  return ck + "/" + name;
}

// A reference run whose checkpoints several tests load: world 4, FULL_SHARD, sharded format.
struct Saved {
  std::string dir;
  std::string ck;
  std::map<int64_t, double> losses;
};
const Saved& saved_world4() {
  static const Saved s = [] {
    Saved out;
    out.dir = make_temp_dir();
    out.ck = out.dir + "/ck";
    const auto run = run_workers_in(out.dir, 4, with(kRun, {"checkpoint.dir=" + q(out.ck)}));
    if (!run.ok()) FAIL(run.describe());
    out.losses = read_step_losses(out.dir);
    return out;
  }();
  return s;
}

RunResult resume(int world, const std::string& from, const std::vector<std::string>& sets) {
  const std::string dir = make_temp_dir();
  return run_workers_in(dir, world,
                        with(kRun, with(sets, {"checkpoint.dir=" + q(dir + "/ck"), "checkpoint.save_final=false",
                                               "checkpoint.interval=0", "checkpoint.resume=" + q(from)})));
}

}  // namespace

TEST_CASE("resume: 20 steps + save + load + 20 steps equals 40 steps", "[trainer][checkpoint][resume]") {
  const auto& saved = saved_world4();
  REQUIRE(saved.losses.size() == 40);
  REQUIRE(fs::exists(step_dir(saved.ck, 20) + "/metadata.json"));
  const auto run = resume(4, step_dir(saved.ck, 20), {});
  INFO(run.describe());
  REQUIRE(run.ok());
  const auto losses = read_step_losses(run.dir);
  REQUIRE(losses.begin()->first == 21);
  const auto [diff, n] = compare(losses, saved.losses, 21);
  WARN("resume, same layout (world 4 FULL_SHARD): steps 21..40 max relative loss diff " << diff);
  CHECK(n == 20);
  CHECK(diff <= 1e-6);
}

TEST_CASE("resume: a checkpoint loads on any world size and strategy", "[trainer][checkpoint][reshard]") {
  const auto& saved = saved_world4();
  struct Case {
    int world;
    std::string strategy;
    std::vector<std::string> extra;
  };
  for (const auto& c :
       {Case{2, "SHARD_GRAD_OP", {}}, Case{0, "NO_SHARD", {}}, Case{4, "HYBRID_SHARD", {"fsdp.shard_group_size=2"}}}) {
    const auto run = resume(c.world, step_dir(saved.ck, 20), with({"fsdp.strategy=" + c.strategy}, c.extra));
    INFO(c.strategy << " world " << c.world << "\n" << run.describe());
    REQUIRE(run.ok());
    const auto [diff, n] = compare(read_step_losses(run.dir), saved.losses, 21);
    WARN("saved on 4 x FULL_SHARD, loaded on " << std::max(1, c.world) << " x " << c.strategy
                                               << ": steps 21..40 max relative loss diff " << diff);
    CHECK(n == 20);
    CHECK(diff < 1e-5);  // other world sizes sum in another order (as in the parity tests)
  }
}

TEST_CASE("full format: rank 0's gathered file resumes exactly and reshards", "[trainer][checkpoint][full]") {
  const std::string dir = make_temp_dir();
  const std::string ck = dir + "/ck";
  const auto run = run_workers_in(dir, 2, with(kRun, {"checkpoint.dir=" + q(ck), "checkpoint.format=full"}));
  INFO(run.describe());
  REQUIRE(run.ok());
  CHECK(fs::exists(step_dir(ck, 20) + "/full.bin"));
  CHECK(!fs::exists(step_dir(ck, 20) + "/rank1.bin"));
  const auto reference = read_step_losses(dir);
  const auto same = resume(2, step_dir(ck, 20), {});
  REQUIRE(same.ok());
  const auto [diff, n] = compare(read_step_losses(same.dir), reference, 21);
  WARN("full format, world 2 -> 2: max relative loss diff " << diff);
  CHECK(n == 20);
  CHECK(diff <= 1e-6);
  const auto other = resume(4, step_dir(ck, 20), {"fsdp.strategy=HYBRID_SHARD_ZERO2", "fsdp.shard_group_size=2"});
  REQUIRE(other.ok());
  const auto [diff4, n4] = compare(read_step_losses(other.dir), reference, 21);
  WARN("full format, world 2 FULL_SHARD -> 4 HYBRID_SHARD_ZERO2: max relative loss diff " << diff4);
  CHECK(n4 == 20);
  CHECK(diff4 < 1e-5);
}

TEST_CASE("safety: a missing, truncated or corrupted shard is refused, naming the file",
          "[trainer][checkpoint][damaged]") {
  const auto& saved = saved_world4();
  auto damaged_copy = [&](const std::string& what) {
    const std::string target = make_temp_dir() + "/step_00000020";
    fs::copy(step_dir(saved.ck, 20), target);
    if (what == "missing") fs::remove(target + "/rank1.bin");
    if (what == "truncated") fs::resize_file(target + "/rank2.bin", fs::file_size(target + "/rank2.bin") - 100);
    if (what == "corrupted") {
      std::fstream f(target + "/rank3.bin", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(1000);
      char byte = 0;
      f.read(&byte, 1);
      f.seekp(1000);
      byte = static_cast<char>(byte ^ 0x10);
      f.write(&byte, 1);
    }
    if (what == "no metadata") fs::remove(target + "/metadata.json");
    return target;
  };
  struct Case {
    std::string what;
    std::string names;
  };
  for (const auto& c : {Case{"missing", "rank1.bin"}, Case{"truncated", "rank2.bin"}, Case{"corrupted", "rank3.bin"},
                        Case{"no metadata", "metadata.json"}}) {
    const auto run = resume(0, damaged_copy(c.what), {});
    INFO(c.what << "\n" << run.describe());
    CHECK(run.exit_codes[0] != 0);
    CHECK_THAT(run.outputs[0], Catch::Contains(c.names));
  }
  // With several ranks, the rank that reads the damaged chunk names it and the others stop too.
  const auto run = resume(2, damaged_copy("corrupted"), {});
  INFO(run.describe());
  CHECK(run.exit_codes[0] != 0);
  CHECK(run.exit_codes[1] != 0);
  CHECK_THAT(run.outputs[0] + run.outputs[1], Catch::Contains("rank3.bin") && Catch::Contains("corrupted"));
}

TEST_CASE("safety: kill -9 of a rank mid-save leaves the previous checkpoint loadable",
          "[trainer][checkpoint][crash]") {
  const std::string dir = make_temp_dir();
  const std::string ck = dir + "/ck";
  const std::vector<std::string> sets = {"train.steps=12", "train.seq_len=32", "train.log_interval=100",
                                         "checkpoint.interval=6", "checkpoint.dir=" + q(ck)};
  // Rank 1 SIGKILLs itself halfway through writing its shard of step 12; meshrun stops rank 0.
  LauncherJob job(dir, 2, sets, {{"MESHRUN_TRAINER_FAULT_KILL_IN_SAVE", "12:1"}});
  const int code = job.wait();
  INFO(job.output());
  CHECK(code != 0);
  CHECK_THAT(job.output(), Catch::Contains("SIGKILL"));
  CHECK(fs::exists(step_dir(ck, 6) + "/metadata.json"));
  CHECK(!fs::exists(step_dir(ck, 12) + "/metadata.json"));
  const auto crashed = read_step_losses(dir);

  const std::string again = make_temp_dir();
  const auto run = run_workers_in(again, 2, with(sets, {"checkpoint.resume=auto"}));
  INFO(run.describe());
  REQUIRE(run.ok());
  CHECK_THAT(run.outputs[0], Catch::Contains("loaded " + step_dir(ck, 6)));
  const auto [diff, n] = compare(read_step_losses(again), crashed, 7);
  CHECK(n == 6);  // steps 7..12 were all logged before the crash
  CHECK(diff <= 1e-6);
  CHECK(fs::exists(step_dir(ck, 12) + "/metadata.json"));
}

TEST_CASE("keep_last keeps the newest complete checkpoints", "[trainer][checkpoint][keep]") {
  // Background saves (steps 2, 4, 6) are pruned the same way: only complete checkpoints count.
  for (const char* async : {"false", "true"}) {
    const std::string dir = make_temp_dir();
    const std::string ck = dir + "/ck";
    const auto run =
        run_workers_in(dir, 0,
                       {"train.steps=8", "train.seq_len=16", "checkpoint.interval=2", "checkpoint.keep_last=2",
                        "checkpoint.dir=" + q(ck), std::string("checkpoint.async=") + async});
    INFO("checkpoint.async=" << async << "\n" << run.describe());
    REQUIRE(run.ok());
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(ck)) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    CHECK(left == std::vector<std::string>{"step_00000006", "step_00000008"});
  }
}

TEST_CASE("preemption: SIGUSR1/SIGTERM to meshrun -> checkpoint, exit 75, exact resume",
          "[trainer][checkpoint][preempt]") {
  // A constant learning rate (min_lr = lr) makes every step's loss independent of train.steps, so the
  // preempted job can be given more steps than it could ever finish before the signal (no race with the
  // end of training), and the reference and the resumed run stop a fixed number of steps after it.
  const std::vector<std::string> sets = {"train.seq_len=64", "train.log_interval=1000", "train.lr=3e-3",
                                         "train.min_lr=3e-3"};
  constexpr int64_t kAfter = 20;  // steps the resumed run trains past the preemption checkpoint

  for (const int sig : {SIGUSR1, SIGTERM}) {
    const std::string dir = make_temp_dir();
    const std::string ck = dir + "/ck";
    // SIGTERM arrives with background saves running (checkpoint.async): the signal's save is a blocking one
    // that completes the save in flight first.
    const std::vector<std::string> background = {"checkpoint.interval=2", "checkpoint.async=true"};
    LauncherJob job(dir, 2,
                    with(with(sets, {"train.steps=1000000", "checkpoint.dir=" + q(ck), "checkpoint.save_final=false"}),
                         sig == SIGTERM ? background : std::vector<std::string>{}));
    // Signal once training is under way (a few steps logged).
    for (int i = 0; i < 600 && read_step_losses(dir).size() < 5; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    job.signal(sig);
    const int code = job.wait();
    INFO("signal " << sig << "\n" << job.output());
    CHECK(code == 75);
    CHECK_THAT(job.output(), Catch::Contains("checkpointed on signal"));
    const auto stopped = read_step_losses(dir);
    REQUIRE(stopped.size() >= 5);
    const int64_t last = stopped.rbegin()->first;
    REQUIRE(fs::exists(step_dir(ck, static_cast<int>(last)) + "/metadata.json"));
    if (sig != SIGUSR1) {
      CHECK_THAT(job.output(), Catch::Contains("in the background"));
      for (const auto& e : fs::directory_iterator(ck)) CHECK(fs::exists(e.path() / "metadata.json"));
      continue;
    }
    const std::vector<std::string> until = with(sets, {"train.steps=" + std::to_string(last + kAfter)});
    const std::string ref_dir = make_temp_dir();
    const auto reference = run_workers_in(ref_dir, 2, until);
    REQUIRE(reference.ok());
    const std::string again = make_temp_dir();
    const auto run = run_workers_in(again, 2, with(until, {"checkpoint.dir=" + q(ck), "checkpoint.resume=auto"}));
    INFO(run.describe());
    REQUIRE(run.ok());
    const auto resumed = read_step_losses(again);
    REQUIRE(!resumed.empty());
    CHECK(resumed.begin()->first == last + 1);
    const auto [diff, n] = compare(resumed, read_step_losses(ref_dir), last + 1);
    WARN("preempted at step " << last << ", resumed: max relative loss diff " << diff << " over " << n << " steps");
    CHECK(n == kAfter);
    CHECK(diff <= 1e-6);
  }
}

namespace {

// The fields of metadata.json that describe the saved bytes (its "config" names checkpoint.dir and
// checkpoint.async, which differ by design).
nlohmann::json saved_contents(const std::string& step_folder) {
  const auto meta = nlohmann::json::parse(read_file(step_folder + "/metadata.json"));
  return {{"step", meta["step"]},
          {"optimizer_steps", meta["optimizer_steps"]},
          {"files", meta["files"]},
          {"tensors", meta["tensors"]}};
}

}  // namespace

TEST_CASE("async: the same bytes as a synchronous save, and the same resume", "[trainer][checkpoint][async]") {
  // World 2, 40 steps: saves at 10, 20 and 30 (in the background when async) and 40 (final: always blocking).
  const std::vector<std::string> sets = {"train.steps=40", "train.seq_len=32", "train.global_batch_size=8",
                                         "train.log_interval=100", "checkpoint.interval=10"};
  struct Run {
    std::string dir;
    std::string ck;
    RunResult result;
  };
  auto train = [&](const char* async) {
    Run r;
    r.dir = make_temp_dir();
    r.ck = r.dir + "/ck";
    r.result =
        run_workers_in(r.dir, 2, with(sets, {"checkpoint.dir=" + q(r.ck), std::string("checkpoint.async=") + async}));
    return r;
  };
  const Run blocking = train("false");
  const Run background = train("true");
  INFO(blocking.result.describe() << background.result.describe());
  REQUIRE(blocking.result.ok());
  REQUIRE(background.result.ok());
  for (const int step : {10, 20, 30})
    CHECK_THAT(background.result.outputs[0],
               Catch::Contains("saved " + step_dir(background.ck, step) + " in the background"));
  CHECK_THAT(background.result.outputs[0], Catch::Contains("saved " + step_dir(background.ck, 40) + " ("));
  // Writing in the background leaves training alone: the same losses, bit for bit.
  const auto losses = read_step_losses(blocking.dir);
  CHECK(read_step_losses(background.dir) == losses);

  // The snapshot is the state after the step: the data files are the same bytes as the blocking save's.
  for (const int step : {10, 20, 30, 40}) {
    for (const char* file : {"rank0.bin", "rank1.bin"}) {
      const std::string a = step_dir(background.ck, step) + "/" + file;
      const std::string b = step_dir(blocking.ck, step) + "/" + file;
      INFO(a << " vs " << b);
      REQUIRE(fs::exists(a));
      CHECK(read_file(a) == read_file(b));
    }
    CHECK(saved_contents(step_dir(background.ck, step)) == saved_contents(step_dir(blocking.ck, step)));
  }

  // Resuming from either step 20 gives the same run, bit for bit, and the uninterrupted one.
  const auto from_background = resume(2, step_dir(background.ck, 20), {});
  const auto from_blocking = resume(2, step_dir(blocking.ck, 20), {});
  INFO(from_background.describe() << from_blocking.describe());
  REQUIRE(from_background.ok());
  REQUIRE(from_blocking.ok());
  const auto resumed = read_step_losses(from_background.dir);
  REQUIRE(resumed.size() == 20);
  CHECK(resumed == read_step_losses(from_blocking.dir));
  const auto [diff, n] = compare(resumed, losses, 21);
  WARN("resume from a background save (world 2): steps 21..40 max relative loss diff " << diff);
  CHECK(n == 20);
  CHECK(diff <= 1e-6);
}

TEST_CASE("async: the write runs beside the next steps, not on the training thread",
          "[trainer][checkpoint][async_overlap]") {
  // Rank 0's write of step 8 stalls 1 s halfway. Written on the training thread, it would end during step 8;
  // in the background, training has gone on (its update waits only for the snapshot, taken before the write).
  const std::string dir = make_temp_dir();
  const auto run =
      run_workers_in(dir, 2,
                     {"train.steps=12", "train.seq_len=16", "train.log_interval=100", "checkpoint.interval=4",
                      "checkpoint.async=true", "checkpoint.dir=" + q(dir + "/ck")},
                     {RankRun{{}, {{"MESHRUN_TRAINER_FAULT_STALL_IN_SAVE", "8:0:1"}}}, RankRun{}});
  INFO(run.describe());
  REQUIRE(run.ok());
  bool seen = false;
  for (const auto& saved : read_events(dir, "checkpoint_saved")) {
    INFO(saved.dump());
    if (saved.value("path", "") != step_dir(dir + "/ck", 8)) continue;
    seen = true;
    CHECK(saved["async"] == true);
    CHECK(saved["written_during_step"].get<int64_t>() >= 9);
  }
  CHECK(seen);
}

TEST_CASE("async: kill -9 of a rank mid-write leaves the previous checkpoint loadable",
          "[trainer][checkpoint][async_crash]") {
  const std::string dir = make_temp_dir();
  const std::string ck = dir + "/ck";
  const std::vector<std::string> sets = {"train.steps=12",        "train.seq_len=32",      "train.log_interval=100",
                                         "checkpoint.interval=4", "checkpoint.async=true", "checkpoint.dir=" + q(ck)};
  // Rank 1's writer thread SIGKILLs the process halfway through rank1.bin of step 8, while training goes on;
  // meshrun stops rank 0.
  LauncherJob job(dir, 2, sets, {{"MESHRUN_TRAINER_FAULT_KILL_IN_SAVE", "8:1"}});
  const int code = job.wait();
  INFO(job.output());
  CHECK(code != 0);
  CHECK_THAT(job.output(), Catch::Contains("SIGKILL"));
  CHECK(fs::exists(step_dir(ck, 4) + "/metadata.json"));
  CHECK(fs::exists(step_dir(ck, 8)));
  CHECK(!fs::exists(step_dir(ck, 8) + "/metadata.json"));
  const auto crashed = read_step_losses(dir);

  // --resume auto skips the incomplete step_8 and continues from step 4, with the same losses.
  const std::string again = make_temp_dir();
  const auto run = run_workers_in(again, 2, with(sets, {"checkpoint.resume=auto"}));
  INFO(run.describe());
  REQUIRE(run.ok());
  CHECK_THAT(run.outputs[0], Catch::Contains("loaded " + step_dir(ck, 4)));
  const auto resumed = read_step_losses(again);
  REQUIRE(!resumed.empty());
  CHECK(resumed.begin()->first == 5);
  const auto [diff, n] = compare(resumed, crashed, 5);
  CHECK(n >= 4);  // steps 5..8 were logged before the save of step 8 began
  CHECK(diff <= 1e-6);
  CHECK(fs::exists(step_dir(ck, 8) + "/metadata.json"));
  CHECK(fs::exists(step_dir(ck, 12) + "/metadata.json"));
}

TEST_CASE("a rank whose write fails stops every rank, naming the rank and the error",
          "[trainer][checkpoint][write_error]") {
  // Rank 1's shard of step 6 is a link to /dev/full: its writes fail with ENOSPC, as on a full disk. Every
  // rank must stop with that rank and error named, right away: not at a barrier after system.timeout_s, and
  // not with a bare "connection closed" from the collective library.
  for (const char* async : {"false", "true"}) {
    const std::string dir = make_temp_dir();
    const std::string ck = dir + "/ck";
    RankRun failing;
    failing.env = {{"MESHRUN_TRAINER_FAULT_DISK_FULL_IN_SAVE", "6:1"}};
    const auto run =
        run_workers_in(dir, 2,
                       {"train.steps=12", "train.seq_len=32", "train.log_interval=100", "checkpoint.interval=3",
                        "checkpoint.dir=" + q(ck), std::string("checkpoint.async=") + async},
                       {RankRun{}, failing});
    INFO("checkpoint.async=" << async << "\n" << run.describe());
    for (int r = 0; r < 2; ++r) {
      CHECK(run.exit_codes[static_cast<size_t>(r)] == 1);
      const std::string& out = run.outputs[static_cast<size_t>(r)];
      CHECK_THAT(out, Catch::Contains("checkpoint " + step_dir(ck, 6) + " could not be saved: rank 1 failed") &&
                          Catch::Contains("No space left on device"));
      CHECK_THAT(out, !Catch::Contains("imed out") && !Catch::Contains("system.timeout_s") &&
                          !Catch::Contains("onnection closed"));
    }
    // The previous checkpoint stays the newest complete one.
    CHECK(fs::exists(step_dir(ck, 3) + "/metadata.json"));
    CHECK(!fs::exists(step_dir(ck, 6) + "/metadata.json"));
    // A blocking save stops the run at its step; a background one within a step or two (when the writer's
    // failure meets a step's all-reduce, or the final save at the latest).
    if (std::string(async) == "false") CHECK(read_step_losses(dir).size() == 6);
  }
}

// meshrun-trainer's progress beats (docs/progress.md): what two real workers send to MESHRUN_PROGRESS
// (a socket the test binds), and, under meshrun with a real daemon, the steps and losses `status` shows.
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"
#include "proto/rendezvous/goodput.hpp"
#include "proto/worker/progress_beat.hpp"
#include "support/subprocess.hpp"
#include "trainer/process_runner.hpp"

using namespace meshrun::testing;
using meshrun::UniqueFd;
using meshrun::proto::Beat;

namespace {

// The agent's end of MESHRUN_PROGRESS: a bound Unix datagram socket drained by a thread as the beats come
// (the kernel queues only net.unix.max_dgram_qlen = 10 datagrams; the agent drains as promptly).
class BeatSink {
 public:
  explicit BeatSink(std::string path) : path_(std::move(path)) {
    fd_.reset(::socket(AF_UNIX, SOCK_DGRAM, 0));
    REQUIRE(fd_.valid());
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path_.size() < sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path_.c_str(), path_.size());
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    timeval tick{.tv_sec = 0, .tv_usec = 50'000};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
    reader_ = std::thread([this] { read(); });
  }
  ~BeatSink() { stop(); }
  BeatSink(const BeatSink&) = delete;
  BeatSink& operator=(const BeatSink&) = delete;
  const std::string& path() const { return path_; }

  /// Every beat received (call once the workers are done).
  std::vector<std::string> stop() {
    if (reader_.joinable()) {
      done_ = true;
      reader_.join();
    }
    return texts_;
  }

 private:
  void read() {
    char buf[meshrun::proto::kMaxBeatBytes + 1];
    while (!done_) {
      const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
      if (n > 0) texts_.emplace_back(buf, static_cast<size_t>(n));
    }
  }

  std::string path_;
  UniqueFd fd_;
  std::atomic<bool> done_{false};
  std::vector<std::string> texts_;  // written by reader_ only until stop() joins it
  std::thread reader_;
};

std::vector<int64_t> steps_in_phase(const std::vector<Beat>& beats, const std::string& phase) {
  std::vector<int64_t> steps;
  for (const auto& b : beats) {
    if (b.phase == phase) steps.push_back(b.step);
  }
  return steps;
}

}  // namespace

TEST_CASE("meshrun-trainer beats every step with its loss, and says when it evaluates or checkpoints",
          "[progress][beats]") {
  const std::string dir = make_temp_dir();
  BeatSink sink0(dir + "/beats0");
  BeatSink sink1(dir + "/beats1");
  // The collective reporter's messages go to a socket of their own beside each (<MESHRUN_PROGRESS>.fr).
  BeatSink reports0(dir + "/beats0.fr");
  BeatSink reports1(dir + "/beats1.fr");
  // 12 steps: evaluation every 5 (and at the end), checkpoints every 6 (and the final one).
  const auto result = run_workers(2,
                                  {"train.steps=12", "train.eval_interval=5", "train.eval_batches=1",
                                   "checkpoint.dir=\"" + dir + "/ckpt\"", "checkpoint.interval=6"},
                                  {RankRun{.sets = {}, .env = {{"MESHRUN_PROGRESS", sink0.path()}}},
                                   RankRun{.sets = {}, .env = {{"MESHRUN_PROGRESS", sink1.path()}}}});
  INFO(result.describe());
  REQUIRE(result.ok());
  const auto losses = read_step_losses(result.dir);
  for (auto [sink, reports] : {std::pair{&sink0, &reports0}, std::pair{&sink1, &reports1}}) {
    std::vector<Beat> beats;
    for (const auto& text : sink->stop()) {
      CHECK_FALSE(text.rfind("fr ", 0) == 0);  // no report among the beats
      beats.push_back(meshrun::proto::parse_beat(text));
    }
    // The collective reports for hang verdicts (collective_reporter.hpp).
    const std::vector<std::string> ledger = reports->stop();
    REQUIRE_FALSE(ledger.empty());
    CHECK_THAT(ledger.front(), Catch::StartsWith("fr hello pid="));
    // Every status names the default group "0" with as many collectives completed as entered, or one open.
    int statuses = 0;
    for (const auto& text : ledger) {
      if (text.rfind("fr status ", 0) != 0) continue;
      ++statuses;
      INFO(text);
      long long entered = 0, completed = 0;
      REQUIRE(std::sscanf(text.c_str(), "fr status 0:%lld:%lld", &entered, &completed) == 2);
      CHECK(entered >= completed);
      CHECK(entered - completed <= 8);  // at most the prefetched all-gathers and reduce-scatters in flight
    }
    CHECK(statuses >= 1);
    // A checkpoint ends with a train beat of its step and no figures: the phase's end, for the goodput ledger.
    CHECK(steps_in_phase(beats, "train") == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10, 11, 12, 12});
    CHECK(steps_in_phase(beats, "eval") == std::vector<int64_t>{5, 10, 12});
    CHECK(steps_in_phase(beats, "checkpoint") == std::vector<int64_t>{6, 12});
    for (size_t i = 0; i < beats.size(); ++i) {
      const Beat& b = beats[i];
      if (b.phase != "train") continue;
      if (i > 0 && beats[i - 1].phase == "checkpoint") {
        CHECK(b.step == beats[i - 1].step);
        CHECK_FALSE(b.loss.has_value());
        continue;
      }
      INFO("step " << b.step);
      REQUIRE(b.loss.has_value());
      REQUIRE(losses.count(b.step) == 1);
      // The beat's loss is the step's global loss (the metrics log), to the 6 digits a beat carries.
      CHECK(std::abs(*b.loss - losses.at(b.step)) <= 1e-5 * std::abs(losses.at(b.step)));
      CHECK(b.tokens_per_s.value_or(0) > 0);
      CHECK(b.compute_s.value_or(0) > 0);
    }
  }
}

TEST_CASE("meshrun-trainer: a rank that never enters a collective is named, with the collective and its group",
          "[progress][hang]") {
  const std::string dir = make_temp_dir();
  // Test hook: rank 1 stops before collective #60 of the default group and never enters it.
  LauncherJob job(dir, 2, {"train.steps=100000"}, {{"MESHRUN_TRAINER_FAULT_SKIP_COLLECTIVE", "60:1"}},
                  {"--standalone", "--hang-floor", "3", "--shutdown-timeout", "2"});
  const int code = job.wait();
  const std::string out = job.output();
  INFO(out);
  CHECK(code == 1);
  CHECK_THAT(out, Catch::Contains("test hook: rank 1 stops before collective #60"));
  const auto at = out.find("meshrun: hang: ");
  REQUIRE(at != std::string::npos);
  const std::string verdict = out.substr(at, out.find('\n', at) - at);
  CHECK_THAT(verdict, Catch::StartsWith("meshrun: hang: rank 1 (") && Catch::Contains(", local rank 1, pid ") &&
                          Catch::Contains(") never entered ") &&
                          Catch::Contains(" #60 of group 0 (ranks 0,1); rank 0 waits in it"));
  CHECK_THAT(out, Catch::Contains("meshrun: worker hung (first failure, attempt 0)"));
}

TEST_CASE("meshrun-trainer: a rank that computes for a while without beats while the other waits is late, not hung",
          "[progress][hang]") {
  const std::string dir = make_temp_dir();
  // Test hook: rank 1 computes for 12 s after step 20 (no beat, no collective), then goes on.
  LauncherJob job(dir, 2, {"train.steps=40"}, {{"MESHRUN_TRAINER_FAULT_BUSY_AFTER_STEP", "20:1:12"}},
                  {"--standalone", "--hang-floor", "3", "--shutdown-timeout", "2"});
  const int code = job.wait();
  const std::string out = job.output();
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("test hook: rank 1 computes for 12.0 s after step 20"));
  const auto at = out.find("meshrun: rank 1 (");
  REQUIRE(at != std::string::npos);
  const std::string late = out.substr(at, out.find('\n', at) - at);
  CHECK_THAT(late, Catch::Contains(") is late: it has not entered ") &&
                       Catch::Contains(" of group 0 (ranks 0,1) for ") &&
                       Catch::Contains(" while rank 0 waits; it is busy ("));
  CHECK_THAT(out, !Catch::Contains("hang:") && !Catch::Contains("worker hung") && !Catch::Contains("restarting"));
}

TEST_CASE("under meshrun, the daemon's status shows every trainer rank's step and loss", "[progress][status]") {
  Daemon daemon;
  const std::string dir = make_temp_dir();
  const std::string endpoint = "127.0.0.1:" + std::to_string(daemon.port());
  LauncherJob job(dir, 2, {"train.steps=100000", "train.min_lr=3e-3"}, {},
                  {"--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "trainer-beats"});
  nlohmann::json ranks;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto [code, text] = meshrun::testing::run(
        {MESHRUN_RENDEZVOUS_BIN, "status", "--endpoint", endpoint, "--json"}, {}, dir + "/status.txt");
    const auto status = nlohmann::json::parse(text, nullptr, false);
    ranks = nlohmann::json::array();
    if (code == 0 && status.is_object()) {
      for (const auto& run : status.value("runs", nlohmann::json::array())) {
        for (const auto& node : run.value("nodes", nlohmann::json::array())) {
          for (const auto& r : node.value("ranks", nlohmann::json::array())) {
            if (r.value("step", 0) >= 3) ranks.push_back(r);
          }
        }
      }
    }
    if (ranks.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  job.signal(SIGTERM);
  job.wait();
  INFO(job.output());
  REQUIRE(ranks.size() == 2);
  for (const auto& r : ranks) {
    CHECK(r.at("loss").get<double>() > 0);
    CHECK(r.at("loss").get<double>() < 10);  // ln(256) = 5.5 at the start, falling
    CHECK(r.at("tokens_per_s").get<double>() > 0);
    CHECK(r.at("phase") == "train");
    CHECK_FALSE(r.at("hung").get<bool>());
  }
  CHECK(ranks[0].at("rank") != ranks[1].at("rank"));
}

// The goodput ledger with a real job: meshrun-trainer under meshrun --standalone, one checkpoint stalled 5 s
// (test hook), rank 1 killed -9 in the middle of a later save (test hook), one restart that resumes from the
// last checkpoint. The wall time split must sum to the wall time, and each event must land in its category.
TEST_CASE("the goodput ledger splits a run's wall time: an injected checkpoint stall, a crash and its restart",
          "[progress][goodput]") {
  const std::string dir = make_temp_dir();
  const std::string logs = dir + "/logs";
  LauncherJob job(dir, 2,
                  {"train.steps=40", "train.log_interval=100", "checkpoint.interval=10", "checkpoint.resume=auto",
                   "checkpoint.dir=\"" + dir + "/ck\""},
                  {{"MESHRUN_TRAINER_FAULT_STALL_IN_SAVE", "20:0:5"}, {"MESHRUN_TRAINER_FAULT_KILL_IN_SAVE", "30:1"}},
                  {"--standalone", "--max-restarts", "1", "--log-dir", logs});
  const int code = job.wait();
  const std::string out = job.output();
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("meshrun: goodput "));
  std::string file;
  for (const auto& entry : std::filesystem::directory_iterator(logs)) {
    if (std::filesystem::exists(entry.path() / "goodput.json")) file = (entry.path() / "goodput.json").string();
  }
  REQUIRE_FALSE(file.empty());
  const auto g = nlohmann::json::parse(read_file(file)).get<meshrun::proto::GoodputReport>();
  INFO(read_file(file));
  CHECK(g.ended);
  CHECK(std::abs(meshrun::proto::accounted_s(g) - g.wall_s) <= 0.01 * g.wall_s);
  CHECK(g.checkpoint_s == Approx(5).margin(1));  // the stall; the other saves of this tiny model take ms
  CHECK(g.restarts == 1);
  CHECK(g.restarts_s > 0);
  CHECK(g.work_lost_s > 0);
  // A first step after a start belongs to the start-up or the restart: steps 1 and 21 open the accounts.
  CHECK(g.recomputed_steps == 9);  // steps 22..30, done again from the step-20 checkpoint
  CHECK(g.steps == 39);            // 2..30, then 31..40
  CHECK(g.startup_s > 0);
  CHECK(g.productive_s > 0);
  CHECK(g.hang_wait_s == 0);
  CHECK(g.untold_s == 0);
  CHECK(g.ratio == Approx(g.productive_s / g.wall_s));
}

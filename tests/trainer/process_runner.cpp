#include "tests/trainer/process_runner.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "support/daemon_process.hpp"
#include "support/subprocess.hpp"

namespace meshrun::testing {
namespace {

using namespace std::chrono_literals;
using meshrun::testing::Process;

// Generous: a safety net for a hung worker, never a timing assertion.
constexpr auto kRunLimit = std::chrono::seconds(600);

// Workers must not inherit a rank layout from the environment running the tests; one thread each.
std::vector<std::string> worker_env(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env = {"RANK",       "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE",
                                  "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS=1"};
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

std::vector<std::string> trainer_args(const std::string& dir) {
  return {MESHRUN_TRAINER_BIN,
          "--config",
          std::string(MESHRUN_CONFIG_DIR) + "/tiny.json",
          "--set",
          "output.dir=\"" + dir + "\"",
          "--set",
          "train.sample_tokens=0",
          "--set",
          "system.timeout_s=30"};
}

void append_sets(std::vector<std::string>& argv, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
}

// Every directory a test makes lives under one root per test process, removed when the process exits;
// MESHRUN_KEEP_TEST_DIRS=1 keeps it for a post-mortem (the path is printed then).
class TempRoot {
 public:
  TempRoot() {
    char tmpl[] = "/tmp/meshrun-trainer-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error(std::string("mkdtemp failed: ") + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempRoot() {
    const char* keep = std::getenv("MESHRUN_KEEP_TEST_DIRS");
    if (keep != nullptr && std::string(keep) == "1") {
      std::fprintf(stderr, "kept the test directories in %s\n", path_.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TempRoot& temp_root() {
  static TempRoot root;  // destroyed at exit, after every test of this process
  return root;
}

}  // namespace

std::string make_temp_dir() {
  std::string tmpl = temp_root().path() + "/XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp under " + temp_root().path() + " failed");
  return tmpl;
}

LauncherJob::LauncherJob(const std::string& dir, int nproc, const std::vector<std::string>& sets,
                         const std::map<std::string, std::string>& env, const std::vector<std::string>& rendezvous)
    : log_(dir + "/launcher.txt") {
  std::vector<std::string> argv = {MESHRUN_LAUNCHER_BIN};
  argv.insert(argv.end(), rendezvous.begin(), rendezvous.end());
  argv.insert(argv.end(), {"--nproc-per-node", std::to_string(nproc)});
  for (auto& a : trainer_args(dir)) argv.push_back(a);
  append_sets(argv, sets);
  process_ = std::make_unique<Process>(argv, worker_env(env), log_);
}

LauncherJob::~LauncherJob() = default;  // Process kills (SIGKILL) and reaps a launcher not waited for

void LauncherJob::signal(int sig) { process_->signal(sig); }

int LauncherJob::wait() { return process_->wait(kRunLimit); }

std::string LauncherJob::output() const { return read_file(log_); }

Daemon::Daemon()
    : dir_(make_temp_dir()),
      process_(std::make_unique<testing::DaemonProcess>(
          MESHRUN_RENDEZVOUS_BIN, std::vector<std::string>{"--log-level", "warn"}, dir_ + "/daemon.txt")) {}

Daemon::~Daemon() {
  process_.reset();  // SIGTERM, reaped
  std::system(("rm -rf '" + dir_ + "'").c_str());
}

int Daemon::port() const { return process_->port(); }

bool RunResult::ok() const {
  for (int c : exit_codes) {
    if (c != 0) return false;
  }
  return !exit_codes.empty();
}

std::string RunResult::describe() const {
  std::string s = "run in " + dir + ":\n";
  for (size_t r = 0; r < exit_codes.size(); ++r) {
    s += "--- rank " + std::to_string(r) + " exit " + std::to_string(exit_codes[r]) + "\n" + outputs[r];
  }
  return s;
}

RunResult run_workers(int world, const std::vector<std::string>& common_sets, std::vector<RankRun> per_rank) {
  return run_workers_in(make_temp_dir(), world, common_sets, std::move(per_rank));
}

RunResult run_workers_in(const std::string& dir, int world, const std::vector<std::string>& common_sets,
                         std::vector<RankRun> per_rank, const std::vector<std::string>& extra_args) {
  RunResult result;
  result.dir = dir;
  const int procs = world == 0 ? 1 : world;
  per_rank.resize(static_cast<size_t>(procs));
  std::unique_ptr<Daemon> daemon;
  if (world > 0) daemon = std::make_unique<Daemon>();
  std::vector<std::unique_ptr<Process>> workers;
  for (int r = 0; r < procs; ++r) {
    const RankRun& rank = per_rank[static_cast<size_t>(r)];
    std::vector<std::string> argv = trainer_args(result.dir);
    for (const auto& a : extra_args) argv.push_back(a);
    append_sets(argv, common_sets);
    append_sets(argv, rank.sets);
    std::map<std::string, std::string> env;
    if (world > 0) {
      env = {{"RANK", std::to_string(r)},
             {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(world)},
             {"LOCAL_WORLD_SIZE", std::to_string(world)},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(daemon->port())},
             {"GROUP_RANK", "0"}};  // one node, as under one launcher
    }
    for (const auto& [k, v] : rank.env) env[k] = v;
    workers.push_back(
        std::make_unique<Process>(argv, worker_env(env), result.dir + "/out" + std::to_string(r) + ".txt"));
  }
  for (auto& worker : workers) {
    result.exit_codes.push_back(worker->wait(kRunLimit));
    result.outputs.push_back(worker->output());
  }
  return result;
}

std::map<int64_t, double> read_step_losses(const std::string& dir) {
  std::map<int64_t, double> losses;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return losses;
}

std::vector<nlohmann::json> read_events(const std::string& dir, const std::string& event) {
  std::vector<nlohmann::json> events;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == event) events.push_back(std::move(j));
  }
  return events;
}

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

std::string q(const std::string& s) { return "\"" + s + "\""; }

std::pair<double, int> compare(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b, int64_t from) {
  double worst = 0;
  int n = 0;
  for (const auto& [step, loss] : a) {
    if (step < from || !b.count(step)) continue;
    worst = std::max(worst, std::abs(loss - b.at(step)) / std::abs(b.at(step)));
    ++n;
  }
  return {worst, n};
}

std::vector<double> read_losses(const std::string& dir) {
  std::vector<double> losses;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

std::vector<float> read_params(const std::string& dir) {
  std::ifstream in(dir + "/params.bin", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace meshrun::testing

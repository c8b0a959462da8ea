// Test support: runs the real meshrun-rendezvous daemon and real meshrun-trainer worker processes
// (one per rank, through tests/support's Process), and reads what the workers wrote to their output
// directory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/subprocess.hpp"  // Process, read_file

namespace meshrun::testing {
class DaemonProcess;
}  // namespace meshrun::testing

namespace meshrun::testing {

/// meshrun-rendezvous --host 127.0.0.1 --port 0, stopped (SIGTERM) on destruction.
class Daemon {
 public:
  Daemon();
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  int port() const;

 private:
  std::string dir_;  // holds the daemon's output
  std::unique_ptr<testing::DaemonProcess> process_;
};

struct RankRun {
  std::vector<std::string> sets;           // --set arguments for this rank
  std::map<std::string, std::string> env;  // extra / overriding environment variables
};

struct RunResult {
  std::vector<int> exit_codes;
  std::vector<std::string> outputs;  // stdout + stderr per rank
  std::string dir;
  bool ok() const;
  std::string describe() const;
};

/// Runs `world` workers of configs/tiny.json with `common_sets` (+ per-rank extras). world == 0 runs one
/// process with no RANK (single process, no store). Output goes to a fresh temporary directory.
RunResult run_workers(int world, const std::vector<std::string>& common_sets, std::vector<RankRun> per_rank = {});

/// Like run_workers, into an existing directory `dir` (output.dir), with extra trainer arguments.
RunResult run_workers_in(const std::string& dir, int world, const std::vector<std::string>& common_sets,
                         std::vector<RankRun> per_rank = {}, const std::vector<std::string>& extra_args = {});

/// A `meshrun <rendezvous> --nproc-per-node N meshrun-trainer ...` job running in the background.
class LauncherJob {
 public:
  /// `rendezvous`: the launcher's rendezvous flags (a private daemon by default).
  LauncherJob(const std::string& dir, int nproc, const std::vector<std::string>& sets,
              const std::map<std::string, std::string>& env = {},
              const std::vector<std::string>& rendezvous = {"--standalone"});
  ~LauncherJob();
  LauncherJob(const LauncherJob&) = delete;
  LauncherJob& operator=(const LauncherJob&) = delete;
  /// Sends `sig` to the launcher (it forwards USR1/TERM to the workers).
  void signal(int sig);
  /// Waits for the launcher; returns its exit code (128 + signal when killed).
  int wait();
  /// Launcher + workers output so far.
  std::string output() const;

 private:
  std::string log_;
  std::unique_ptr<testing::Process> process_;
};

std::string make_temp_dir();
/// The `loss` of every step record in metrics.jsonl, keyed by step.
std::map<int64_t, double> read_step_losses(const std::string& dir);
std::vector<double> read_losses(const std::string& dir);
/// The events of metrics.jsonl named `event` ("memory_copy", "checkpoint_saved", ...), in order.
std::vector<nlohmann::json> read_events(const std::string& dir, const std::string& event);

/// `base` followed by `extra` (--set lists).
std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& extra);
/// `s` in double quotes: a --set value that is a path.
std::string q(const std::string& s);
/// The largest relative loss difference over the steps from `from` that both runs logged, and how many.
std::pair<double, int> compare(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b, int64_t from);
std::vector<float> read_params(const std::string& dir);

}  // namespace meshrun::testing

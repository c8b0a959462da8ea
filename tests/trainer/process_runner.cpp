#include "tests/trainer/process_runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

extern char** environ;

namespace meshrun::trainer::test {
namespace {

int spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
          const std::string& output_path, int stdout_fd = -1) {
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // Workers must not inherit a rank layout from the environment running the tests.
  for (const char* k : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    merged.erase(k);
  merged["OMP_NUM_THREADS"] = "1";
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
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

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

std::string make_temp_dir() {
  char tmpl[] = "/tmp/meshrun-trainer-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

LauncherJob::LauncherJob(const std::string& dir, int nproc, const std::vector<std::string>& sets,
                         const std::map<std::string, std::string>& env)
    : log_(dir + "/launcher.txt") {
  std::vector<std::string> argv = {MESHRUN_LAUNCHER_BIN, "--standalone", "--nproc-per-node", std::to_string(nproc)};
  for (auto& a : trainer_args(dir)) argv.push_back(a);
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  pid_ = spawn(argv, env, log_);
}

LauncherJob::~LauncherJob() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

void LauncherJob::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int LauncherJob::wait() {
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return exit_code_of(status);
}

std::string LauncherJob::output() const { return read_file(log_); }

Daemon::Daemon() {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_ = spawn({MESHRUN_RENDEZVOUS_BIN, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"}, {}, "", fds[1]);
  ::close(fds[1]);
  std::string line;
  char ch;
  while (::read(fds[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  ::close(fds[0]);
  const auto colon = line.rfind(':');
  if (line.rfind("listening on", 0) != 0 || colon == std::string::npos) {
    throw std::runtime_error("meshrun-rendezvous did not print 'listening on HOST:PORT' (got '" + line + "')");
  }
  port_ = std::stoi(line.substr(colon + 1));
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

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
  std::vector<int> pids;
  for (int r = 0; r < procs; ++r) {
    std::vector<std::string> argv = trainer_args(result.dir);
    for (const auto& a : extra_args) argv.push_back(a);
    for (const auto& s : common_sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    for (const auto& s : per_rank[static_cast<size_t>(r)].sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    std::map<std::string, std::string> env;
    if (world > 0) {
      env = {{"RANK", std::to_string(r)},           {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_WORLD_SIZE", std::to_string(world)},
             {"MASTER_ADDR", "127.0.0.1"},          {"MASTER_PORT", std::to_string(daemon->port())}};
    }
    for (const auto& [k, v] : per_rank[static_cast<size_t>(r)].env) env[k] = v;
    pids.push_back(spawn(argv, env, result.dir + "/out" + std::to_string(r) + ".txt"));
  }
  for (int r = 0; r < procs; ++r) {
    int status = 0;
    ::waitpid(pids[static_cast<size_t>(r)], &status, 0);
    result.exit_codes.push_back(exit_code_of(status));
    result.outputs.push_back(read_file(result.dir + "/out" + std::to_string(r) + ".txt"));
  }
  return result;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

}  // namespace meshrun::trainer::test

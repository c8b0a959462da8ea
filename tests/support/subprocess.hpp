// Test helpers for running real programs: start one with extra environment and captured output, wait for it
// with a safety deadline, signal it, and scan the process table for leftovers of a job.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace meshrun::testing {

/// A fresh folder under TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/meshrun-test-XXXXXX";
    path_ = ::mkdtemp(templ.data()) ? templ : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// An environment entry unique to one test job; every process of the job inherits it, so
/// processes_with_env() finds survivors.
inline std::string unique_marker() {
  std::random_device rd;
  return "MESHRUN_TEST_JOB=" + std::to_string(rd()) + std::to_string(::getpid());
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

/// Waits until `path` exists; false after `limit` (a safety net, not a timing assertion).
inline bool wait_for_file(const std::string& path, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!file_exists(path)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// A child process with stdout+stderr captured to a file. It inherits this process's environment with
/// `env_overrides` applied: "KEY=VALUE" sets, a bare "KEY" removes.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env_overrides,
          const std::string& out_path)
      : out_path_(out_path) {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& kv : env_overrides) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos) {
          ::unsetenv(kv.c_str());
        } else {
          ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
        }
      }
      const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(126);
    }
  }
  ~Process() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  /// Exit code (128+signal when killed); -1 when still running after `limit` (then it is killed).
  int wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (true) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > end) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        done_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    done_ = true;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }
  std::string output() const { return read_file(out_path_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string out_path_;
};

/// Runs to completion; returns {exit code, output}.
inline std::pair<int, std::string> run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                       const std::string& out_path) {
  Process p(argv, env, out_path);
  const int code = p.wait();
  return {code, p.output()};
}

/// True when the process exists and is not a zombie.
inline bool process_alive(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

/// Pids of live (non-zombie) processes whose environment contains `marker` ("KEY=VALUE").
inline std::vector<pid_t> processes_with_env(const std::string& marker) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
    size_t start = 0;
    bool has = false;
    while (start < env.size() && !has) {
      const size_t end = env.find('\0', start);
      has = env.compare(start, (end == std::string::npos ? env.size() : end) - start, marker) == 0;
      if (end == std::string::npos) break;
      start = end + 1;
    }
    if (has && process_alive(pid)) found.push_back(pid);
  }
  ::closedir(d);
  return found;
}

/// Waits until no live process carries `marker`; returns the survivors after `limit`.
inline std::vector<pid_t> wait_no_processes_with_env(const std::string& marker,
                                                     std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (true) {
    auto left = processes_with_env(marker);
    if (left.empty() || std::chrono::steady_clock::now() > end) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The text after `prefix` up to the end of its line in `text`, once that line is complete; "" before.
inline std::string line_after(const std::string& text, const std::string& prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) return "";
  const auto end = text.find('\n', at);
  return end == std::string::npos ? "" : text.substr(at + prefix.size(), end - at - prefix.size());
}

/// "127.0.0.1:PORT" for the port an agent started with `--rdzv-endpoint 127.0.0.1:0 --rdzv-conf is_host=1`
/// serves the rendezvous on, read from its announcement ("hosting the rendezvous on ADDR:PORT"); empty if
/// none came within `limit`. The
/// kernel picks the port and the agent keeps it bound, so no other program can take it in between.
inline std::string wait_for_hosted_endpoint(const Process& agent,
                                            std::chrono::seconds limit = std::chrono::seconds(60)) {
  static const std::string kAnnouncement = "hosting the rendezvous on ";
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    const std::string out = agent.output();
    const auto at = out.find(kAnnouncement);
    if (at != std::string::npos) {
      const auto colon = out.find(':', at + kAnnouncement.size());
      const auto stop = out.find_first_not_of("0123456789", colon + 1);
      if (colon != std::string::npos && stop != std::string::npos && stop > colon + 1) {
        return "127.0.0.1:" + out.substr(colon + 1, stop - colon - 1);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

}  // namespace meshrun::testing

#include "launcher/workers/job_token.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <thread>

#include "common/unique_fd.hpp"

namespace meshrun::launcher {
namespace {

// Whether /proc/<pid>/environ holds `wanted` ("NAME=value") as one whole entry.
bool environ_holds(pid_t pid, const std::string& wanted) {
  const std::string path = "/proc/" + std::to_string(pid) + "/environ";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;  // gone, or another user's
  std::string env;
  char buf[8192];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;) env.append(buf, static_cast<size_t>(n));
  for (size_t at = 0; at < env.size();) {
    const size_t end = env.find('\0', at);
    const size_t len = (end == std::string::npos ? env.size() : end) - at;
    if (env.compare(at, len, wanted) == 0) return true;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
}

}  // namespace

std::string make_job_token() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::vector<pid_t> processes_with_token(const std::string& token) {
  const std::string wanted = std::string(kJobTokenVariable) + "=" + token;
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  const pid_t self = ::getpid();
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == self) continue;
    if (environ_holds(static_cast<pid_t>(pid), wanted)) found.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return found;
}

size_t kill_processes_with_token(const std::string& token, std::chrono::milliseconds limit,
                                 const std::vector<pid_t>& spared) {
  std::set<pid_t> killed;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const auto scan = [&] {
    auto found = processes_with_token(token);
    std::erase_if(found, [&](pid_t pid) { return std::find(spared.begin(), spared.end(), pid) != spared.end(); });
    return found;
  };
  // Until a scan finds none: new ones (a parent forking as it dies) and the killed ones still exiting. A
  // zombie's environment reads empty, so one that died but is not reaped yet no longer counts.
  for (auto found = scan(); !found.empty(); found = scan()) {
    for (pid_t pid : found) {
      ::kill(pid, SIGKILL);
      killed.insert(pid);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return killed.size();
}

}  // namespace meshrun::launcher

// launcher_test_worker: a tiny worker for the launcher tests. The first argument picks the behaviour:
//   env DIR                   write the torchrun environment to DIR/env.<RANK> and exit 0
//   exit CODE                 exit with CODE
//   fail-rank RANK CODE DIR   rank RANK exits CODE once the others are up; the others wait for a signal
//   fail-until RESTART RANK CODE  rank RANK exits CODE while TORCHELASTIC_RESTART_COUNT < RESTART; else exit 0
//   wait DIR                  write DIR/pid.<RANK>, wait for SIGTERM/SIGINT, record it in DIR/got.<RANK>, exit 0
//   stderr-then-exit CODE     print three lines on stderr, then exit CODE
//   memory-hold DIR           hello on $MESHRUN_MEMORY, keep the two slots it grants, write DIR/memory.<RANK>, wait
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd_passing.hpp"
#include "launcher/workers/worker_env_keys.hpp"
#include "proto/worker/memory_handover.hpp"

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int rank() { return std::atoi(env_or("RANK", "-1").c_str()); }

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(90);
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // readers never see half a file
}

volatile std::sig_atomic_t g_signal = 0;  // set by the handler only
void on_signal(int sig) { g_signal = sig; }

int wait_for_signal(const std::string& dir) {
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGUSR1, on_signal);
  write_file(dir + "/pid." + std::to_string(rank()), std::to_string(::getpid()) + "\n");
  for (int i = 0; i < 600 * 100 && g_signal == 0; ++i) ::usleep(10000);
  write_file(dir + "/got." + std::to_string(rank()), std::to_string(g_signal) + "\n");
  return g_signal == 0 ? 99 : 0;
}

// Waits (up to 60 s) until every other rank of WORLD_SIZE has written DIR/pid.<rank>, i.e. is waiting for
// a signal. False when they never come.
bool wait_for_the_others(const std::string& dir) {
  const int world = std::atoi(env_or("WORLD_SIZE", "1").c_str());
  for (int i = 0; i < 60 * 100; ++i) {
    bool all = true;
    for (int r = 0; r < world && all; ++r)
      all = r == rank() || ::access((dir + "/pid." + std::to_string(r)).c_str(), F_OK) == 0;
    if (all) return true;
    ::usleep(10000);
  }
  return false;
}

}  // namespace

// Asks the agent for its memory-copy slots as a worker that checkpoints to memory would, records how many
// descriptors came, and waits for a signal (the slots stay mapped in no way: holding the fds is enough).
int hold_memory_slots(const std::string& dir) {
  const std::string path = env_or("MESHRUN_MEMORY", "");
  meshrun::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (path.empty() || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return 3;
  const meshrun::proto::CopyShape shape{
      .world_size = 1, .layout = "", .slot_bytes = 16384, .largest_slot_bytes = 0, .digest = 1};
  meshrun::send_packet(fd.get(), meshrun::proto::format_handover_request(meshrun::proto::HandoverRequest::hello(
                                     std::atoi(env_or("RANK", "0").c_str()), shape)));
  const auto granted = meshrun::receive_packet(fd.get(), std::chrono::milliseconds(10000));
  try {
    if (granted.closed || granted.timed_out ||
        meshrun::proto::parse_handover_reply(granted.text).kind != meshrun::proto::HandoverReply::Kind::kGranted)
      return 4;
  } catch (const std::exception&) {
    return 4;
  }
  write_file(dir + "/memory." + env_or("RANK", "x"), std::to_string(granted.fds.size()));
  for (;;) pause();
}

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const std::string mode = argv[1];
  if (mode == "env" && argc >= 3) {
    std::vector<std::string_view> keys(meshrun::launcher::kWorkerEnvKeys.begin(),
                                       meshrun::launcher::kWorkerEnvKeys.end());
    keys.push_back("OMP_NUM_THREADS");     // torchrun sets it for several workers per node; so does meshrun
    keys.push_back("MESHRUN_RDZV_TOKEN");  // must never be set: the token is the agents' secret
    std::string text;
    for (const auto k : keys) {
      const std::string key(k);
      if (const char* v = std::getenv(key.c_str())) text += key + "=" + v + "\n";
    }
    text += "ARGS=";
    for (int i = 3; i < argc; ++i) text += std::string(i > 3 ? " " : "") + argv[i];
    text += "\n";
    write_file(std::string(argv[2]) + "/env." + env_or("RANK", "x"), text);
    return 0;
  }
  if (mode == "exit" && argc >= 3) return std::atoi(argv[2]);
  if (mode == "fail-rank" && argc >= 5) {
    if (rank() == std::atoi(argv[2])) {
      if (!wait_for_the_others(argv[4])) return 98;
      std::fprintf(stderr, "rank %d is about to fail on purpose\n", rank());
      return std::atoi(argv[3]);
    }
    return wait_for_signal(argv[4]);
  }
  if (mode == "fail-until" && argc >= 5) {
    const int restarts = std::atoi(env_or("TORCHELASTIC_RESTART_COUNT", "0").c_str());
    if (rank() == std::atoi(argv[3]) && restarts < std::atoi(argv[2])) return std::atoi(argv[4]);
    return 0;
  }
  if (mode == "wait" && argc >= 3) return wait_for_signal(argv[2]);
  if (mode == "memory-hold" && argc >= 3) return hold_memory_slots(argv[2]);
  if (mode == "stderr-then-exit" && argc >= 3) {
    std::fprintf(stderr, "line one\nline two\nboom: something broke\n");
    return std::atoi(argv[2]);
  }
  return 64;
}

#include "trainer/distributed/dist_env.hpp"

#include <cstdlib>

#include "common/error.hpp"

namespace meshrun::trainer {
namespace {

int read_int(const char* name, bool required, int fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') {
    if (required)
      throw UsageError(std::string("RANK is set but ") + name + " is not: launch through meshrun or torchrun");
    return fallback;
  }
  char* end = nullptr;
  const long v = std::strtol(raw, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 30) {
    throw UsageError(std::string("environment variable ") + name + "='" + raw + "' is not a non-negative integer");
  }
  return static_cast<int>(v);
}

}  // namespace

DistEnv read_dist_env() {
  DistEnv env;
  if (std::getenv("RANK") == nullptr) return env;
  env.distributed = true;
  env.rank = read_int("RANK", true, 0);
  env.world_size = read_int("WORLD_SIZE", true, 1);
  env.local_rank = read_int("LOCAL_RANK", false, env.rank);
  env.local_world_size = read_int("LOCAL_WORLD_SIZE", false, env.world_size);
  env.group_rank = read_int("GROUP_RANK", false, -1);
  env.master_port = read_int("MASTER_PORT", true, 0);
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0') throw UsageError("RANK is set but MASTER_ADDR is not");
  env.master_addr = addr;
  if (const char* rc = std::getenv("TORCHELASTIC_RESTART_COUNT"); rc != nullptr && *rc != '\0') env.restart_count = rc;
  if (env.world_size < 1 || env.rank >= env.world_size) {
    throw UsageError("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  }
  if (env.master_port == 0 || env.master_port > 65535) {
    throw UsageError("MASTER_PORT=" + std::to_string(env.master_port) + " is not a valid port");
  }
  return env;
}

}  // namespace meshrun::trainer

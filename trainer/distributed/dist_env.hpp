// DistEnv: the rank layout a launcher (meshrun, torchrun) hands a worker through the environment.
// No RANK means a single process with no store.
#pragma once

#include <string>

namespace meshrun::trainer {

struct DistEnv {
  bool distributed = false;
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = -1;  // GROUP_RANK: the launcher's node rank; -1 when the launcher did not set it
  std::string master_addr;
  int master_port = 0;
  std::string restart_count = "0";  // TORCHELASTIC_RESTART_COUNT: keys of a restarted round never collide
};

/// Reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
/// TORCHELASTIC_RESTART_COUNT. Throws UsageError naming the variable that is missing or malformed.
DistEnv read_dist_env();

}  // namespace meshrun::trainer

// The variables meshrun sets in a worker's environment: torchrun's, and meshrun's own. One list, read by the
// launcher (an inherited value of any of them is dropped, so a stale one from an outer launch cannot leak
// through) and by the tests that dump a worker's environment.
#pragma once

#include <array>
#include <string_view>

namespace meshrun::launcher {

inline constexpr std::array<std::string_view, 24> kWorkerEnvKeys = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "MESHRUN_PROGRESS",
    "MESHRUN_RDZV_ENDPOINT",
    "MESHRUN_RUN_ID",
    "MESHRUN_JOB_TOKEN",
    "MESHRUN_MEMORY",
    "MESHRUN_QUICK_EXIT",
    "CUDA_VISIBLE_DEVICES",
};

}  // namespace meshrun::launcher

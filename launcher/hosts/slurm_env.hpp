// SlurmJob: what meshrun learns from SLURM's environment when srun starts one meshrun per node, so that
// `srun --ntasks-per-node=1 meshrun train.py` needs no rendezvous flags. The options parser applies it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/env_lookup.hpp"

namespace meshrun::launcher {

struct SlurmJob {
  std::string job_id;       // SLURM_JOB_ID: the run id, and the seed of the rendezvous port
  bool under_srun = false;  // SLURM_STEP_ID is set only in tasks that srun started (not in the batch script)
  int node_id = 0;          // SLURM_NODEID: this node's index in the step
  int num_nodes = 1;        // SLURM_STEP_NUM_NODES (else SLURM_NNODES)
  int num_tasks = 0;        // SLURM_STEP_NUM_TASKS (else SLURM_NTASKS); 0 when unknown
  std::string nodelist;     // SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), hostlist syntax
  std::string first_host;   // the first host of `nodelist`: it hosts the rendezvous
  std::optional<int> gpus;  // SLURM_GPUS_ON_NODE, else the entries of CUDA_VISIBLE_DEVICES
};

/// nullopt when SLURM_JOB_ID is unset (not a SLURM job). Throws UsageError naming the variable when a
/// SLURM variable is malformed (bad hostlist, non-numeric node id).
std::optional<SlurmJob> detect_slurm_job(const EnvLookup& env);

/// The rendezvous port of a job: 20000 + job id mod 12000 (below Linux's ephemeral range 32768+). Jobs
/// sharing a node differ in the port unless their ids are 12000 apart; --rdzv-endpoint overrides it.
uint16_t slurm_rdzv_port(const std::string& job_id);

}  // namespace meshrun::launcher

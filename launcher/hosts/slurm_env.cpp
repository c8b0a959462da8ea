#include "launcher/hosts/slurm_env.hpp"

#include <charconv>

#include "common/error.hpp"
#include "launcher/hosts/hostlist.hpp"

namespace meshrun::launcher {
namespace {

constexpr uint16_t kSlurmPortBase = 20000;
constexpr uint64_t kSlurmPortSpan = 12000;

std::optional<std::string> first_set(const EnvLookup& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env(n); v && !v->empty()) return v;
  }
  return std::nullopt;
}

int env_int(const EnvLookup& env, const char* name, int fallback) {
  const auto v = env(name);
  if (!v || v->empty()) return fallback;
  int out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || ptr != v->data() + v->size() || out < 0) {
    throw UsageError(std::string(name) + "='" + *v + "' is not a non-negative number (is this a SLURM job?)");
  }
  return out;
}

}  // namespace

std::optional<SlurmJob> detect_slurm_job(const EnvLookup& env) {
  const auto job_id = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job_id) return std::nullopt;
  SlurmJob job;
  job.job_id = *job_id;
  job.under_srun = env("SLURM_STEP_ID").has_value() || env("SLURM_STEPID").has_value();
  job.node_id = env_int(env, "SLURM_NODEID", 0);
  // A step may use only part of the allocation; its own node list and counts are the ones that matter.
  job.num_nodes = env_int(env, env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES", 1);
  job.num_tasks = env_int(env, env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 0);
  job.nodelist = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}).value_or("");
  if (!job.nodelist.empty()) {
    const auto hosts = expand_hostlist(job.nodelist);
    if (!hosts.empty()) job.first_host = hosts.front();
  }
  if (const auto g = env("SLURM_GPUS_ON_NODE"); g && !g->empty()) {
    job.gpus = env_int(env, "SLURM_GPUS_ON_NODE", 0);
  } else if (const auto cvd = env("CUDA_VISIBLE_DEVICES"); cvd && !cvd->empty()) {
    int n = 1;
    for (char c : *cvd) n += c == ',';
    job.gpus = n;
  }
  return job;
}

uint16_t slurm_rdzv_port(const std::string& job_id) {
  // Array and heterogeneous jobs look like "123_4" / "123+1"; hash the whole text so each gets its own.
  uint64_t value = 0;
  bool numeric = !job_id.empty();
  for (char c : job_id) numeric = numeric && c >= '0' && c <= '9';
  if (numeric && job_id.size() < 19) {
    value = std::stoull(job_id);
  } else {
    for (unsigned char c : job_id) value = value * 131 + c;  // stable across hosts, unlike std::hash
  }
  return static_cast<uint16_t>(kSlurmPortBase + value % kSlurmPortSpan);
}

}  // namespace meshrun::launcher

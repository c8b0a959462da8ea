// SLURM detection: what `srun meshrun train.py` derives from SLURM's variables, and when it refuses or warns.
#include <catch2/catch.hpp>
#include <map>

#include "common/error.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/hosts/slurm_env.hpp"

using namespace meshrun;
using namespace meshrun::launcher;

namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup env_of(Vars vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

// The variables srun sets in a task of a 3-node, one-task-per-node step (as seen on a real slurmd).
// NOTE: built with insert_or_assign: GCC 12 -O3 reports a bogus -Wrestrict for the initializer-list form.
Vars srun_task(const std::string& node_id) {
  Vars v;
  for (const auto& [k, val] : std::vector<std::pair<std::string, std::string>>{{"SLURM_JOB_ID", "4242"},
                                                                               {"SLURM_JOB_NODELIST", "gpu[01-03]"},
                                                                               {"SLURM_NNODES", "3"},
                                                                               {"SLURM_NTASKS", "3"},
                                                                               {"SLURM_STEP_ID", "0"},
                                                                               {"SLURM_STEP_NODELIST", "gpu[01-03]"},
                                                                               {"SLURM_STEP_NUM_NODES", "3"},
                                                                               {"SLURM_STEP_NUM_TASKS", "3"}}) {
    v.insert_or_assign(k, val);
  }
  v.insert_or_assign("SLURM_NODEID", node_id);
  v.insert_or_assign("SLURM_PROCID", node_id);
  return v;
}

ParseResult parse(std::vector<std::string> args, Vars env) {
  return parse_launch_options(args, env_of(env), HostInfo{.gpu_count = 0, .cpu_count = 8});
}

}  // namespace

TEST_CASE("inside srun, meshrun takes nodes, rank, endpoint and run id from SLURM", "[slurm]") {
  const auto r = parse({"train.py"}, srun_task("2"));
  const auto& o = r.options;
  CHECK(o.slurm);
  CHECK(o.backend == RdzvBackend::kC10d);
  CHECK(o.min_nodes == 3);
  CHECK(o.max_nodes == 3);
  CHECK(o.node_rank == 2);
  CHECK(o.node_rank_given);
  REQUIRE(o.rdzv_endpoint);
  CHECK(o.rdzv_endpoint->host == "gpu01");
  CHECK(o.rdzv_endpoint->port == slurm_rdzv_port("4242"));
  CHECK(o.run_id == "4242");
  CHECK(o.nproc_per_node == 1);
  REQUIRE(r.notes.size() == 1);
  CHECK_THAT(r.notes[0], Catch::Contains("node 2 of 3"));
}

TEST_CASE("SLURM GPUs set the workers per node unless --nproc-per-node is given", "[slurm]") {
  auto vars = srun_task("0");
  vars.insert_or_assign("SLURM_GPUS_ON_NODE", "4");
  CHECK(parse({"train.py"}, vars).options.nproc_per_node == 4);
  CHECK(parse({"--nproc-per-node", "2", "train.py"}, vars).options.nproc_per_node == 2);
  vars.erase("SLURM_GPUS_ON_NODE");
  vars.insert_or_assign("CUDA_VISIBLE_DEVICES", "0,1,2");
  CHECK(parse({"train.py"}, vars).options.nproc_per_node == 3);
}

TEST_CASE("explicit rendezvous flags and elastic ranges win over SLURM", "[slurm]") {
  const auto& a =
      parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "head:1234", "--nnodes", "3", "t.py"}, srun_task("1"));
  CHECK_FALSE(a.options.slurm);
  CHECK(a.options.rdzv_endpoint->to_string() == "head:1234");
  const auto b = parse({"--nnodes", "2:3", "--rdzv-id", "mine", "t.py"}, srun_task("1")).options;
  CHECK(b.slurm);
  CHECK(b.min_nodes == 2);
  CHECK(b.max_nodes == 3);
  CHECK(b.run_id == "mine");
}

TEST_CASE("SLURM variables outside srun give a warning and a single-node run", "[slurm]") {
  auto vars = srun_task("0");
  vars.erase("SLURM_STEP_ID");
  const auto r = parse({"train.py"}, vars);
  CHECK_FALSE(r.options.slurm);
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0], Catch::Contains("not started by srun"));
  CHECK(parse({"train.py"}, {}).warnings.empty());
}

TEST_CASE("more than one srun task per node is refused with the fix", "[slurm]") {
  auto vars = srun_task("0");
  vars.insert_or_assign("SLURM_STEP_NUM_TASKS", "6");
  CHECK_THROWS_WITH(parse({"train.py"}, vars), Catch::Contains("--ntasks-per-node=1"));
}

TEST_CASE("the rendezvous port depends on the job id and stays out of the ephemeral range", "[slurm]") {
  CHECK(slurm_rdzv_port("4242") != slurm_rdzv_port("4243"));
  CHECK(slurm_rdzv_port("4242") == slurm_rdzv_port("4242"));
  for (const std::string id : {"1", "99999999", "123_4", "77+1", "18446744073709551615999"}) {
    const int p = slurm_rdzv_port(id);
    CHECK(p >= 20000);
    CHECK(p < 32768);
  }
}

TEST_CASE("a node of the allocation beyond --nnodes asks for no node rank: it waits as a hot spare", "[slurm]") {
  const auto spare = parse({"--nnodes", "2", "--replace-slow-nodes", "train.py"}, srun_task("2"));
  CHECK(spare.options.slurm);
  CHECK(spare.options.max_nodes == 2);
  CHECK_FALSE(spare.options.node_rank_given);
  CHECK(spare.options.slow_nodes.replace);
  REQUIRE(spare.notes.size() == 1);
  CHECK_THAT(spare.notes[0], Catch::Contains("node 2 of 2 (beyond --nnodes: a hot spare)"));
  const auto seated = parse({"--nnodes", "2", "train.py"}, srun_task("1"));
  CHECK(seated.options.node_rank_given);
  CHECK(seated.options.node_rank == 1);
}

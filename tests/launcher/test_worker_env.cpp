// WorkerEnvironment and WorkerCommand: what each worker is started with.
#include <catch2/catch.hpp>
#include <map>

#include "launcher/workers/python_command_line.hpp"
#include "launcher/workers/worker_command.hpp"
#include "launcher/workers/worker_env.hpp"

using namespace meshrun::launcher;

namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& e : env) {
    const auto eq = e.find('=');
    REQUIRE(m.count(e.substr(0, eq)) == 0);  // no duplicate keys
    m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

AttemptSettings two_nodes_second() {
  return AttemptSettings{.role = "trainer",
                         .run_id = "job",
                         .master_addr = "10.0.0.1",
                         .master_port = 41000,
                         .rdzv_endpoint = "10.0.0.1:29400",
                         .restart_count = 1,
                         .max_restarts = 3,
                         .group_rank = 1,
                         .group_world_size = 2,
                         .world_size = 8,
                         .local_world_size = 4,
                         .rank_offset = 4,
                         .virtual_local_rank = false,
                         .job_token = "0123abcd",
                         .memory_socket = "",
                         .socket_ifname = ""};
}

}  // namespace

TEST_CASE("the torchrun environment contract for each rank layout", "[worker_env]") {
  const WorkerEnvironment env(
      {"PATH=/bin", "RANK=99", "MASTER_PORT=1", "MESHRUN_PROGRESS=/stale/outer.sock", "MESHRUN_JOB_TOKEN=outer"},
      two_nodes_second());
  const auto m =
      as_map(env.for_worker({.local_rank = 2, .error_file = "/tmp/e.json", .progress_socket = "/tmp/p/2.sock"}));
  CHECK(m.at("MESHRUN_PROGRESS") == "/tmp/p/2.sock");  // ours, not the outer launch's
  CHECK(m.at("MESHRUN_JOB_TOKEN") == "0123abcd");
  CHECK(m.at("PATH") == "/bin");
  CHECK(m.at("RANK") == "6");
  CHECK(m.at("LOCAL_RANK") == "2");
  CHECK(m.at("WORLD_SIZE") == "8");
  CHECK(m.at("LOCAL_WORLD_SIZE") == "4");
  CHECK(m.at("GROUP_RANK") == "1");
  CHECK(m.at("GROUP_WORLD_SIZE") == "2");
  CHECK(m.at("ROLE_RANK") == "6");
  CHECK(m.at("ROLE_WORLD_SIZE") == "8");
  CHECK(m.at("ROLE_NAME") == "trainer");
  CHECK(m.at("MASTER_ADDR") == "10.0.0.1");
  CHECK(m.at("MASTER_PORT") == "41000");
  CHECK(m.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(m.at("TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(m.at("TORCHELASTIC_RUN_ID") == "job");
  CHECK(m.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(m.at("TORCHELASTIC_ERROR_FILE") == "/tmp/e.json");
  CHECK(m.at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");  // torchrun's default
  CHECK(m.at("MESHRUN_RDZV_ENDPOINT") == "10.0.0.1:29400");
  CHECK(m.at("OMP_NUM_THREADS") == "1");
}

TEST_CASE("OMP_NUM_THREADS is left alone when set or when one worker runs", "[worker_env]") {
  auto s = two_nodes_second();
  CHECK(as_map(WorkerEnvironment({"OMP_NUM_THREADS=8"}, s).for_worker({})).at("OMP_NUM_THREADS") == "8");
  s.local_world_size = 1;
  CHECK(as_map(WorkerEnvironment({}, s).for_worker({})).count("OMP_NUM_THREADS") == 0);
}

TEST_CASE("flag --virtual-local-rank gives each worker one device at index 0", "[worker_env]") {
  auto s = two_nodes_second();
  s.virtual_local_rank = true;
  const auto m = as_map(WorkerEnvironment({"CUDA_VISIBLE_DEVICES=4,5,6,7"}, s)
                            .for_worker({.local_rank = 2, .error_file = "", .progress_socket = ""}));
  CHECK(m.at("LOCAL_RANK") == "0");
  CHECK(m.at("CUDA_VISIBLE_DEVICES") == "6");
}

TEST_CASE("the network that reaches the rendezvous is Gloo's and NCCL's unless the user chose one", "[worker_env]") {
  auto s = two_nodes_second();
  CHECK(as_map(WorkerEnvironment({}, s).for_worker({})).count("GLOO_SOCKET_IFNAME") == 0);  // none found: none set
  CHECK(as_map(WorkerEnvironment({}, s).for_worker({})).count("NCCL_SOCKET_IFNAME") == 0);
  s.socket_ifname = "eth1";
  auto m = as_map(WorkerEnvironment({"PATH=/bin"}, s).for_worker({}));
  CHECK(m.at("GLOO_SOCKET_IFNAME") == "eth1");
  CHECK(m.at("NCCL_SOCKET_IFNAME") == "=eth1");  // exactly eth1, not every name starting with it
  // The user's choice is kept, each variable on its own.
  m = as_map(WorkerEnvironment({"GLOO_SOCKET_IFNAME=ib0"}, s).for_worker({}));
  CHECK(m.at("GLOO_SOCKET_IFNAME") == "ib0");
  CHECK(m.at("NCCL_SOCKET_IFNAME") == "=eth1");
  m = as_map(WorkerEnvironment({"NCCL_SOCKET_IFNAME=^docker,lo"}, s).for_worker({}));
  CHECK(m.at("GLOO_SOCKET_IFNAME") == "eth1");
  CHECK(m.at("NCCL_SOCKET_IFNAME") == "^docker,lo");
  // An empty value names nothing: ours replaces it (as_map fails on a duplicate key).
  m = as_map(WorkerEnvironment({"GLOO_SOCKET_IFNAME=", "NCCL_SOCKET_IFNAME="}, s).for_worker({}));
  CHECK(m.at("GLOO_SOCKET_IFNAME") == "eth1");
  CHECK(m.at("NCCL_SOCKET_IFNAME") == "=eth1");
}

TEST_CASE("worker commands: .py and -m under python -u, the rest directly", "[worker_command]") {
  EntrypointSettings o;
  o.entrypoint = "sh";
  o.args = {"-c", "true"};
  const auto direct = build_worker_command(o, "/usr/bin:/bin", std::nullopt);
  CHECK((direct.executable == "/usr/bin/sh" || direct.executable == "/bin/sh"));
  CHECK(direct.argv == std::vector<std::string>{"sh", "-c", "true"});

  o.entrypoint = "pkg.mod";
  o.module = true;
  o.args = {};
  const auto mod = build_worker_command(o, "/usr/bin:/bin", std::optional<std::string>("sh"));
  CHECK(mod.argv == std::vector<std::string>{"sh", "-u", "-m", "pkg.mod"});

  o.module = false;
  o.entrypoint = "/no/such/prog";
  CHECK_THROWS_AS(build_worker_command(o, "/usr/bin:/bin", std::nullopt), EntrypointError);
  CHECK_FALSE(find_executable("definitely-not-a-program-xyz", "/usr/bin:/bin"));
}

TEST_CASE("an interpreter entrypoint: python's own command line read as CPython reads it", "[worker_command]") {
  CHECK(is_python_interpreter("python"));
  CHECK(is_python_interpreter("python3"));
  CHECK(is_python_interpreter("python3.11"));
  CHECK(is_python_interpreter("/opt/venv/bin/python3.12"));
  CHECK_FALSE(is_python_interpreter("python3."));
  CHECK_FALSE(is_python_interpreter("python-config"));
  CHECK_FALSE(is_python_interpreter("ipython"));
  CHECK_FALSE(is_python_interpreter("/usr/bin/pythonx"));

  using Args = std::vector<std::string>;
  auto run = std::get<PythonRun>(read_interpreter_args({"train.py", "--lr", "3e-4"}));
  CHECK(run.flags.empty());
  CHECK_FALSE(run.module);
  CHECK(run.target == "train.py");
  CHECK(run.args == Args{"--lr", "3e-4"});

  run = std::get<PythonRun>(read_interpreter_args({"-uB", "-X", "dev", "-Wignore", "script", "-u"}));
  CHECK(run.flags == Args{"-uB", "-Xdev", "-Wignore"});
  CHECK(run.target == "script");  // any file Python is given is a script, .py or not
  CHECK(run.args == Args{"-u"});  // the script's own, after its name

  run = std::get<PythonRun>(read_interpreter_args({"-um", "pkg.train", "--steps", "3"}));
  CHECK(run.flags == Args{"-u"});
  CHECK(run.module);
  CHECK(run.target == "pkg.train");
  CHECK(run.args == Args{"--steps", "3"});
  CHECK(std::get<PythonRun>(read_interpreter_args({"-mpkg"})).target == "pkg");
  CHECK(std::get<PythonRun>(read_interpreter_args({"--", "-odd.py"})).target == "-odd.py");
  CHECK(std::get<PythonRun>(read_interpreter_args({"--check-hash-based-pycs", "never", "a.py"})).flags ==
        Args{"--check-hash-based-pycs", "never"});

  for (const Args& refused : {Args{}, Args{"-c", "print(1)"}, Args{"-i", "a.py"}, Args{"-", "x"}, Args{"-V"},
                              Args{"-x", "a.py"}, Args{"-X"}, Args{"--help"}, Args{"-uZ", "a.py"}}) {
    INFO((refused.empty() ? std::string("(nothing)") : refused.front()));
    CHECK(std::holds_alternative<NotAScriptRun>(read_interpreter_args(refused)));
  }

  EntrypointSettings o;
  o.entrypoint = "sh";
  o.args = {"-c", "true"};
  CHECK(build_worker_command(o, "/usr/bin:/bin", std::nullopt).why_not_python == "the entrypoint is no .py script");
  o.entrypoint = "python3";
  o.args = {"-u", "train.py", "--x"};
  const auto command = build_worker_command(o, "/usr/bin:/bin", std::nullopt);
  CHECK(command.argv == Args{"python3", "-u", "train.py", "--x"});  // run as written
  REQUIRE(command.python);
  CHECK(command.python->target == "train.py");
  o.args = {"-c", "print(1)"};
  CHECK(build_worker_command(o, "/usr/bin:/bin", std::nullopt).why_not_python ==
        "the interpreter runs a command (-c), not a script");
}

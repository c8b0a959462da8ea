// parse_launch_options: torchrun's flags in both spellings, PET_* fallbacks, errors that name the option.
#include <catch2/catch.hpp>
#include <csignal>
#include <map>

#include "common/error.hpp"
#include "launcher/cli/options.hpp"

using namespace meshrun;
using namespace meshrun::launcher;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

LaunchOptions parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return parse_launch_options(args, env_of(env), HostInfo{.gpu_count = 2, .cpu_count = 8}).options;
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("both spellings of torchrun options are accepted", "[options]") {
  const auto a = parse({"--nproc_per_node", "4", "--max_restarts=2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                        "10.0.0.1", "--rdzv_id", "job7", "--nnodes", "2", "train.py"});
  const auto b = parse({"--nproc-per-node", "4", "--max-restarts=2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        "10.0.0.1", "--rdzv-id", "job7", "--nnodes", "2", "train.py"});
  for (const auto& o : {a, b}) {
    CHECK(o.nproc_per_node == 4);
    CHECK(o.max_restarts == 2);
    CHECK(o.backend == RdzvBackend::kC10d);
    REQUIRE(o.rdzv_endpoint);
    CHECK(o.rdzv_endpoint->host == "10.0.0.1");
    CHECK(o.rdzv_endpoint->port == 29400);
    CHECK(o.run_id == "job7");
    CHECK(o.min_nodes == 2);
    CHECK(o.max_nodes == 2);
    CHECK(o.entrypoint == "train.py");
  }
}

TEST_CASE("everything after the entrypoint goes to the worker untouched", "[options]") {
  const auto o = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "9", "--lr", "0.1", "--", "x"});
  CHECK(o.nproc_per_node == 2);
  CHECK(o.entrypoint == "train.py");
  CHECK(o.args == std::vector<std::string>{"--nproc-per-node", "9", "--lr", "0.1", "--", "x"});

  SECTION("-- separates the entrypoint") {
    const auto p = parse({"--standalone", "--", "prog", "-v"});
    CHECK(p.entrypoint == "prog");
    CHECK(p.args == std::vector<std::string>{"-v"});
  }
  SECTION("-m takes the module as entrypoint") {
    const auto p = parse({"-m", "pkg.train", "--epochs", "1"});
    CHECK(p.module);
    CHECK(p.entrypoint == "pkg.train");
  }
}

TEST_CASE("PET_* variables stand in for absent options, argv wins", "[options]") {
  const auto o = parse({"train.py"}, {{"PET_NPROC_PER_NODE", "3"}, {"PET_STANDALONE", "1"}, {"PET_MAX_RESTARTS", "1"}});
  CHECK(o.nproc_per_node == 3);
  CHECK(o.standalone);
  CHECK(o.max_restarts == 1);
  const auto p = parse({"--nproc-per-node", "5", "train.py"}, {{"PET_NPROC_PER_NODE", "3"}});
  CHECK(p.nproc_per_node == 5);
}

TEST_CASE("flag --nproc-per-node accepts auto, gpu and cpu", "[options]") {
  CHECK(parse({"--nproc-per-node", "gpu", "x"}).nproc_per_node == 2);
  CHECK(parse({"--nproc-per-node", "auto", "x"}).nproc_per_node == 2);
  CHECK(parse({"--nproc-per-node", "cpu", "x"}).nproc_per_node == 8);
  CHECK(resolve_nproc_per_node("auto", HostInfo{.gpu_count = 0, .cpu_count = 6}) == 6);
  CHECK_THROWS_AS(resolve_nproc_per_node("gpu", HostInfo{.gpu_count = 0, .cpu_count = 6}), UsageError);
}

TEST_CASE("unknown, malformed and contradictory options name the option", "[options]") {
  CHECK_THAT(error_of({"--nprocs", "2", "x"}), Catch::Contains("--nprocs"));
  CHECK_THAT(error_of({"--nproc-per-node", "zero", "x"}), Catch::Contains("--nproc-per-node"));
  CHECK_THAT(error_of({"--nproc-per-node", "0", "x"}), Catch::Contains("--nproc-per-node"));
  CHECK_THAT(error_of({"--nnodes", "3:2", "x"}), Catch::Contains("--nnodes"));
  CHECK_THAT(error_of({"--nnodes", "0", "x"}), Catch::Contains("--nnodes"));
  CHECK_THAT(error_of({"--standalone", "--nnodes", "2", "x"}), Catch::Contains("--standalone"));
  CHECK_THAT(error_of({"-m", "--no-python", "x"}), Catch::Contains("--no-python"));
  CHECK_THAT(error_of({"--rdzv-backend", "etcd", "x"}), Catch::Contains("etcd"));
  CHECK_THAT(error_of({"--rdzv-backend", "c10d", "--nnodes", "2", "x"}), Catch::Contains("--rdzv-endpoint"));
  CHECK_THAT(error_of({"--nnodes", "1:2", "x"}), Catch::Contains("static"));
  CHECK_THAT(error_of({"--nnodes", "2", "--node-rank", "2", "x"}), Catch::Contains("--node-rank"));
  CHECK_THAT(error_of({"--rdzv-conf", "join_timout=5", "x"}), Catch::Contains("join_timout"));
  CHECK_THAT(error_of({"--redirects", "5", "x"}), Catch::Contains("--redirects"));
  CHECK_THAT(error_of({"--master-port", "70000", "x"}), Catch::Contains("--master-port"));
  CHECK_THAT(error_of({"--signals-to-handle", "SIGKILL", "x"}), Catch::Contains("SIGKILL"));
  CHECK_THAT(error_of({"--standalone"}), Catch::Contains("ENTRYPOINT"));
}

TEST_CASE("flag --help and --version do not launch", "[options]") {
  const auto h = parse_launch_options({"--help"}, env_of({}), HostInfo{});
  REQUIRE(h.print_and_exit);
  CHECK_THAT(*h.print_and_exit, Catch::Contains("--nproc-per-node"));
  const auto v = parse_launch_options({"--version"}, env_of({}), HostInfo{});
  REQUIRE(v.print_and_exit);
  CHECK_THAT(*v.print_and_exit, Catch::Contains("meshrun"));
}

TEST_CASE("stream masks, rdzv-conf, nnodes ranges and signal lists", "[options]") {
  const auto m = parse_stream_mask("0:1,1:2", "--redirects");
  CHECK(m.for_rank(0) == 1);
  CHECK(m.for_rank(1) == 2);
  CHECK(m.for_rank(2) == 0);
  CHECK(parse_stream_mask("3", "--tee").for_rank(7) == 3);

  const auto c = parse_rdzv_conf("join_timeout=900,keep_alive_interval=2,keep_alive_max_attempt=4,is_host=0");
  CHECK(c.join_timeout_s == 900);
  CHECK(c.keep_alive_interval_s == 2);
  CHECK(c.keep_alive_max_attempt == 4);
  REQUIRE(c.is_host);
  CHECK_FALSE(*c.is_host);
  CHECK_FALSE(c.http_port);
  CHECK(parse_rdzv_conf("http_port=8080").http_port == std::optional<uint16_t>(8080));
  CHECK_THROWS_WITH(parse_rdzv_conf("http_port=70000"), Catch::Contains("http_port='70000': expected a port"));

  CHECK(parse_nnodes("1:4") == std::pair<int, int>{1, 4});
  CHECK(parse_nnodes("3") == std::pair<int, int>{3, 3});
  CHECK(parse_signal_list("SIGTERM,usr1,INT") == std::vector<int>{SIGTERM, SIGUSR1, SIGINT});
  // The workers see the flag as given (TORCHELASTIC_SIGNALS_TO_HANDLE), else torchrun's default.
  CHECK(parse({"--signals-to-handle", "SIGTERM,SIGUSR1", "x"}).signals_to_handle_text == "SIGTERM,SIGUSR1");
  CHECK(parse({"x"}).signals_to_handle_text == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");

  CHECK(parse_filter_list("loss,step") == std::vector<std::string>{"loss", "step"});
  CHECK(parse_filter_list("a,,b,c") == std::vector<std::string>{"a,b", "c"});  // torchrun's escape
  CHECK(parse({"--duplicate-stdout-filters", "loss", "x"}).duplicate_stdout_filters ==
        std::vector<std::string>{"loss"});
  CHECK(parse({"x"}).duplicate_stderr_filters.empty());
}

TEST_CASE("torchrun flags meshrun cannot honour are refused with what to use, never ignored", "[options]") {
  CHECK_THAT(error_of({"--numa-binding", "node", "x"}), Catch::Contains("numactl"));
  CHECK_THAT(error_of({"--logs-specs", "mine", "x"}), Catch::Contains("--log-dir"));
  CHECK_THAT(error_of({"--event-log-handler", "console", "x"}), Catch::Contains("status --json"));
  CHECK(error_of({"--event-log-handler", "null", "--start-method", "fork", "x"}).empty());
  CHECK_THAT(error_of({"--start-method", "thread", "x"}), Catch::Contains("start-method"));
  CHECK_THAT(error_of({"--rdzv-conf", "store_type=file", "x"}), Catch::Contains("TCP store"));
  CHECK_THAT(error_of({"--rdzv-conf", "use_libuv=maybe", "x"}), Catch::Contains("use_libuv"));
  CHECK(error_of({"--rdzv-conf", "store_type=tcp,use_libuv=0", "x"}).empty());
  // local_addr in --rdzv-conf is --local-addr, which wins when both are given.
  CHECK(parse({"--rdzv-conf", "local_addr=10.0.0.7", "x"}).local_addr == "10.0.0.7");
  CHECK(parse({"--local-addr", "10.0.0.8", "--rdzv-conf", "local_addr=10.0.0.7", "x"}).local_addr == "10.0.0.8");
}

TEST_CASE("flag --standalone picks c10d and a random id, static takes the master from the flags", "[options]") {
  const auto s = parse({"--standalone", "--rdzv-id", "x", "prog"});
  CHECK(s.backend == RdzvBackend::kC10d);
  CHECK(s.run_id.empty());
  CHECK_FALSE(s.rdzv_endpoint);

  const auto t =
      parse({"--nnodes", "2", "--node_rank", "1", "--master_addr", "10.1.1.1", "--master_port", "1234", "p"});
  CHECK(t.backend == RdzvBackend::kStatic);
  CHECK(t.node_rank == 1);
  CHECK(t.master_addr == "10.1.1.1");
  CHECK(t.master_port == std::optional<uint16_t>(1234));
  // An IPv6 master address may come in brackets, as in an endpoint.
  CHECK(parse({"--nnodes", "2", "--master-addr", "[fd00::1]", "p"}).master_addr == "fd00::1");
}

TEST_CASE("replacing slow nodes is opt-in, with its times, and refused where it cannot work", "[options]") {
  const auto off = parse({"train.py"});
  CHECK_FALSE(off.slow_nodes.replace);
  CHECK(off.slow_nodes.after_s == 60);
  CHECK(off.slow_nodes.cooldown_s == 1800);
  const auto on = parse({"--replace-slow-nodes", "--slow-node-after", "20", "--slow-node-cooldown", "600", "train.py"});
  CHECK(on.slow_nodes.replace);
  CHECK(on.slow_nodes.after_s == 20);
  CHECK(on.slow_nodes.cooldown_s == 600);
  CHECK_THAT(error_of({"--replace-slow-nodes", "--straggler-threshold", "0", "train.py"}),
             Catch::Contains("needs the straggler alert"));
  CHECK_THAT(error_of({"--slow-node-after", "0", "train.py"}), Catch::Contains("--slow-node-after"));
  // The etcd backend judges slow nodes too (node rank 0's agent: launcher/etcd/slow_node_judge.hpp).
  CHECK(parse({"--replace-slow-nodes", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "e0:2379", "train.py"})
            .slow_nodes.replace);
}

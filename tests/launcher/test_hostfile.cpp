// The fan-out's inputs: DeepSpeed-style hostfiles, --include/--exclude, .meshrun_env, and the meshrun
// options forwarded to each host.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/cli/env_file.hpp"
#include "launcher/cli/options.hpp"
#include "launcher/hosts/hostfile.hpp"
#include "launcher/ssh_fanout.hpp"

using namespace meshrun;
using namespace meshrun::launcher;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names(const std::vector<HostEntry>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.host);
  return out;
}

}  // namespace

TEST_CASE("hostfiles: hosts, slots, comments and blank lines", "[hostfile]") {
  const auto hosts = parse_hostfile("# cluster\n\nworker-0 slots=4\n  worker-1   slots=8  # big\nworker-2\n", "hf");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].host == "worker-0");
  CHECK(hosts[0].slots == 4);
  CHECK(hosts[1].slots == 8);
  CHECK(hosts[2].slots == 0);
}

TEST_CASE("bad hostfiles name the file and line", "[hostfile]") {
  CHECK_THAT(error_of([] { parse_hostfile("a slots=2\nb slots=x\n", "hf"); }), Catch::Contains("hf:2"));
  CHECK_THAT(error_of([] { parse_hostfile("a slots=0\n", "hf"); }), Catch::Contains("slot count"));
  CHECK_THAT(error_of([] { parse_hostfile("a gpus=2\n", "hf"); }), Catch::Contains("HOST slots=N"));
  CHECK_THAT(error_of([] { parse_hostfile("a slots=1\na slots=2\n", "hf"); }), Catch::Contains("listed twice"));
  CHECK_THAT(error_of([] { parse_hostfile("# nothing\n\n", "hf"); }), Catch::Contains("no hosts"));
}

TEST_CASE("hostfile: --include and --exclude pick hosts and slots", "[hostfile]") {
  const auto hosts = parse_hostfile("a slots=4\nb slots=4\nc slots=4\n", "hf");
  CHECK(names(select_hosts(hosts, "", "")) == std::vector<std::string>{"a", "b", "c"});
  CHECK(names(select_hosts(hosts, "a@c", "")) == std::vector<std::string>{"a", "c"});
  CHECK(names(select_hosts(hosts, "", "b")) == std::vector<std::string>{"a", "c"});
  const auto inc = select_hosts(hosts, "b:0,2", "");
  REQUIRE(inc.size() == 1);
  CHECK(inc[0].picked == std::vector<int>{0, 2});
  const auto exc = select_hosts(hosts, "", "a:1");
  REQUIRE(exc.size() == 3);
  CHECK(exc[0].picked == std::vector<int>{0, 2, 3});
  CHECK(exc[1].picked.empty());
  CHECK_THAT(error_of([&] { select_hosts(hosts, "zz", ""); }), Catch::Contains("zz is not in the hostfile"));
  CHECK_THAT(error_of([&] { select_hosts(hosts, "a:4", ""); }), Catch::Contains("slots 0..3"));
  CHECK_THAT(error_of([&] { select_hosts(hosts, "a", "b"); }), Catch::Contains("cannot be combined"));
  CHECK_THAT(error_of([&] { select_hosts(hosts, "", "a@b@c"); }), Catch::Contains("leaves no host"));
}

TEST_CASE(".meshrun_env lines", "[hostfile]") {
  const auto vars = parse_env_file("# comment\n\nNCCL_DEBUG=INFO\nexport A=b=c\n  PATHX=/x:/y\n", "env");
  REQUIRE(vars.size() == 3);
  CHECK(vars[0] == std::pair<std::string, std::string>{"NCCL_DEBUG", "INFO"});
  CHECK(vars[1] == std::pair<std::string, std::string>{"A", "b=c"});
  CHECK(vars[2].first == "PATHX");
  CHECK_THAT(error_of([] { parse_env_file("ok=1\nnot a var\n", "envf"); }), Catch::Contains("envf:2"));
  CHECK_THAT(error_of([] { parse_env_file("1X=2\n", "envf"); }), Catch::Contains("VAR=VALUE"));
}

TEST_CASE("fan-out forwards the user's options but not those it sets per host", "[hostfile]") {
  const std::vector<std::string> args{"--hostfile",
                                      "hf",
                                      "--include=a",
                                      "-e",
                                      "b",
                                      "--nnodes",
                                      "2",
                                      "--max-restarts",
                                      "3",
                                      "--rdzv_endpoint",
                                      "x:1",
                                      "--standalone",
                                      "--export",
                                      "V",
                                      "--ssh-opts",
                                      "-p 22",
                                      "--node-rank=1",
                                      "--tee",
                                      "3"};
  CHECK(strip_fanout_options(args) == std::vector<std::string>{"--max-restarts", "3", "--tee", "3"});
  CHECK(shell_quote("it's") == "'it'\\''s'");
  // The token leaves --rdzv-conf (it goes to the hosts in the environment); the rest of the conf stays.
  CHECK(strip_fanout_options({"--rdzv-conf", "read_timeout=30,token=s3cret,is_host=0", "--rdzv_conf=token=x"}) ==
        std::vector<std::string>{"--rdzv-conf", "read_timeout=30,is_host=0"});
}

TEST_CASE("the launcher's own options are told apart from the entrypoint's", "[hostfile]") {
  const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  const HostInfo host{.gpu_count = 0, .cpu_count = 4};
  const auto a =
      parse_launch_options({"--hostfile", "hf", "--max-restarts", "1", "prog", "--max-restarts", "9"}, env, host);
  CHECK(a.options.launcher_args == std::vector<std::string>{"--hostfile", "hf", "--max-restarts", "1"});
  CHECK(a.options.fanout.hostfile == "hf");
  const auto b = parse_launch_options({"--export", "A", "--export", "B=1", "--", "prog", "x"}, env, host);
  CHECK(b.options.launcher_args == std::vector<std::string>{"--export", "A", "--export", "B=1"});
  CHECK(b.options.fanout.exports == std::vector<std::string>{"A", "B=1"});
  CHECK(b.options.entrypoint == "prog");
}

TEST_CASE("flag --export takes one variable per use, so the entrypoint is not swallowed", "[hostfile]") {
  const auto env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  const auto r = parse_launch_options({"--hostfile", "hf", "--export", "A", "train.py", "--lr", "1"}, env, HostInfo{});
  CHECK(r.options.fanout.exports == std::vector<std::string>{"A"});
  CHECK(r.options.entrypoint == "train.py");
  CHECK(r.options.args == std::vector<std::string>{"--lr", "1"});
}

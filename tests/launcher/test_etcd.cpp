// The etcd-v3 backend against a real etcd (tests/support/etcd_server.hpp): the v3 JSON gateway client,
// then meshrun agents on loopback that meet through etcd only (no meshrun daemon anywhere).

#include <catch2/catch.hpp>
#include <csignal>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/base64.hpp"
#include "common/error.hpp"
#include "launcher/etcd/etcd_client.hpp"
#include "support/etcd_server.hpp"
#include "support/subprocess.hpp"

using meshrun::Endpoint;
using meshrun::launcher::etcd::EtcdClient;
using meshrun::launcher::etcd::WatchEvent;
using meshrun::testing::EtcdServer;
using meshrun::testing::Process;
using meshrun::testing::read_file;
using meshrun::testing::TempDir;
using meshrun::testing::unique_marker;
namespace etcd = meshrun::launcher::etcd;
using namespace std::chrono_literals;

namespace {

EtcdClient client_for(const EtcdServer& server) { return EtcdClient({server.endpoint()}, 2000ms); }

/// meshrun over etcd with `nnodes`, 1 worker per node unless `extra` says otherwise.
std::vector<std::string> etcd_agent(const EtcdServer& server, const std::string& run_id, const std::string& nnodes,
                                    std::vector<std::string> extra, std::vector<std::string> worker) {
  std::vector<std::string> argv{
      MESHRUN_BIN, "--nnodes", nnodes, "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", server.endpoint().to_string(),
      "--rdzv-id", run_id};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), worker.begin(), worker.end());
  return argv;
}

// Two agents started with `argv` meet and both exit 0, leaving no process behind (their outputs in `dir`).
void two_agents_meet(const std::vector<std::string>& argv, const std::string& dir) {
  const std::string marker = unique_marker();
  Process a(argv, {marker}, dir + "/a.out");
  Process b(argv, {marker}, dir + "/b.out");
  const int code_a = a.wait(120s);
  const int code_b = b.wait(120s);
  INFO(a.output() << "\n---\n" << b.output());
  CHECK(code_a == 0);
  CHECK(code_b == 0);
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

std::string venv_path() {
  const char* path = std::getenv("PATH");
  return std::string("PATH=") + VENV_BIN + ":" + (path ? path : "/usr/bin:/bin");
}

}  // namespace

TEST_CASE("etcd client: put, range by prefix, compare-and-swap on the mod revision", "[etcd]") {
  EtcdServer server;
  EtcdClient etcd = client_for(server);
  const int64_t rev = etcd.put("/t/a", "1");
  etcd.put("/t/b", "2");
  etcd.put("/u/c", "3");
  const auto all = etcd.range("/t/", etcd::prefix_end("/t/"));
  REQUIRE(all.kvs.size() == 2);
  CHECK(all.kvs[0].key == "/t/a");
  CHECK(all.kvs[1].value == "2");
  CHECK(etcd.range("/t/", etcd::prefix_end("/t/"), true).count == 2);
  // A swap against the revision it read succeeds once; the second, against the same stale revision, fails.
  CHECK(etcd.txn({etcd::mod_revision_is("/t/a", rev)}, {etcd::put_op("/t/a", "10")}).succeeded);
  const auto stale =
      etcd.txn({etcd::mod_revision_is("/t/a", rev)}, {etcd::put_op("/t/a", "20")}, {etcd::range_op("/t/a")});
  CHECK_FALSE(stale.succeeded);
  REQUIRE(stale.ranges.size() == 1);
  CHECK(stale.ranges[0].kvs.at(0).value == "10");
  // Create-if-absent, and "nothing under the prefix changed since".
  CHECK(etcd.txn({etcd::absent("/t/new")}, {etcd::put_op("/t/new", "x")}).succeeded);
  CHECK_FALSE(etcd.txn({etcd::absent("/t/new")}, {etcd::put_op("/t/new", "y")}).succeeded);
  const int64_t now = etcd.range("/t/a").revision;
  CHECK(etcd.txn({etcd::unchanged_since("/t/", etcd::prefix_end("/t/"), now)}, {etcd::put_op("/v", "1")}).succeeded);
  etcd.put("/t/later", "z");
  CHECK_FALSE(
      etcd.txn({etcd::unchanged_since("/t/", etcd::prefix_end("/t/"), now)}, {etcd::put_op("/v", "2")}).succeeded);
  // Binary-safe keys and values (base64 on the wire).
  const std::string bytes("\x00\xff\x10 \n", 5);
  etcd.put("/bin", bytes);
  CHECK(etcd.range("/bin").kvs.at(0).value == bytes);
}

TEST_CASE("etcd client: a lease's keys vanish unless it is renewed", "[etcd]") {
  EtcdServer server;
  EtcdClient etcd = client_for(server);
  const int64_t kept = etcd.grant_lease(2);
  const int64_t dropped = etcd.grant_lease(2);
  etcd.put("/l/kept", "1", kept);
  etcd.put("/l/dropped", "1", dropped);
  const auto end = std::chrono::steady_clock::now() + 4500ms;
  while (std::chrono::steady_clock::now() < end) {
    CHECK(etcd.keep_alive(kept) > 0);
    std::this_thread::sleep_for(500ms);
  }
  CHECK(etcd.range("/l/kept").kvs.size() == 1);
  CHECK(etcd.range("/l/dropped").kvs.empty());
  CHECK(etcd.keep_alive(dropped) == 0);
  etcd.revoke(kept);
  CHECK(etcd.range("/l/kept").kvs.empty());
}

TEST_CASE("etcd client: a watch returns the next change under the prefix, or nothing after its wait", "[etcd]") {
  EtcdServer server;
  EtcdClient etcd = client_for(server);
  const int64_t rev = etcd.put("/w/x", "0");
  const auto start = std::chrono::steady_clock::now();
  CHECK(etcd.watch("/w/", etcd::prefix_end("/w/"), rev + 1, 300ms).empty());
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  auto writer = std::async(std::launch::async, [&server] {
    std::this_thread::sleep_for(200ms);
    client_for(server).put("/w/y", "1");
  });
  const auto events = etcd.watch("/w/", etcd::prefix_end("/w/"), rev + 1, 10s);
  writer.get();
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == WatchEvent::Type::kPut);
  CHECK(events[0].kv.key == "/w/y");
  // Changes since a revision are not lost: watching from before them returns them at once.
  const auto past = etcd.watch("/w/", etcd::prefix_end("/w/"), rev, 10s);
  REQUIRE_FALSE(past.empty());
  CHECK(past[0].kv.key == "/w/x");
}

TEST_CASE("etcd client: a member that does not answer is skipped, and none answering names them all", "[etcd]") {
  EtcdServer server;
  const Endpoint dead{"127.0.0.1", meshrun::testing::free_port()};
  EtcdClient etcd({dead, server.endpoint()}, 1000ms);
  etcd.put("/k", "v");
  CHECK(etcd.range("/k").kvs.at(0).value == "v");
  const Endpoint dead2{"127.0.0.1", meshrun::testing::free_port()};
  EtcdClient none({dead, dead2}, 1000ms);
  try {
    none.range("/k");
    FAIL("a cluster with no live member answered");
  } catch (const meshrun::NetworkError& e) {
    CHECK_THAT(e.what(), Catch::Contains(dead.to_string()) && Catch::Contains(dead2.to_string()));
  }
}

TEST_CASE("etcd client and agents with user/password auth: the right user passes, a wrong password is named",
          "[etcd]") {
  EtcdServer server;
  TempDir dir;
  // Users root and rdzv (read-write on /meshrun/), then auth on: what an etcd admin does.
  EtcdClient admin = client_for(server);
  const auto b64 = [](const std::string& s) { return meshrun::base64_encode(s); };
  for (const auto& [user, password] : {std::pair{"root", "root-pw"}, std::pair{"rdzv", "rdzv-pw"}})
    admin.call("/v3/auth/user/add", nlohmann::json{{"name", user}, {"password", password}}.dump());
  admin.call("/v3/auth/role/add", R"({"name":"root"})");
  admin.call("/v3/auth/user/grant", R"({"user":"root","role":"root"})");
  admin.call("/v3/auth/role/add", R"({"name":"rdzv"})");
  admin.call(
      "/v3/auth/role/grant",
      nlohmann::json{{"name", "rdzv"},
                     {"perm", {{"permType", "READWRITE"}, {"key", b64("/meshrun/")}, {"range_end", b64("/meshrun0")}}}}
          .dump());
  admin.call("/v3/auth/user/grant", R"({"user":"rdzv","role":"rdzv"})");
  admin.call("/v3/auth/enable", "{}");

  EtcdClient rdzv({server.endpoint()}, 2000ms, {.user = "rdzv", .password = "rdzv-pw"});
  rdzv.put("/meshrun/k", "v");
  CHECK(rdzv.range("/meshrun/k").kvs.at(0).value == "v");
  CHECK_THROWS(client_for(server).range("/meshrun/k"));  // no user: etcd refuses
  EtcdClient wrong({server.endpoint()}, 2000ms, {.user = "rdzv", .password = "guess"});
  CHECK_THROWS_WITH(wrong.range("/meshrun/k"),
                    Catch::Contains("refused user 'rdzv'") && Catch::Contains("password_file"));

  // Two agents meet through the auth-enabled etcd, the password in a file (not on the command line).
  const std::string password_file = dir.path() + "/etcd-password";
  std::ofstream(password_file) << "rdzv-pw\n";
  two_agents_meet(etcd_agent(server, "authjob", "2", {"--rdzv-conf", "username=rdzv,password_file=" + password_file},
                             {"--no-python", "true"}),
                  dir.path());
}

TEST_CASE("etcd client and agents over TLS: the members' CA and a client certificate pass, another CA is named",
          "[etcd][tls]") {
  TempDir dir;
  const auto certs = meshrun::testing::EtcdCerts::make(dir.path(), ETCD_TEST_HELPERS);
  EtcdServer server(certs);
  EtcdClient good({server.endpoint()}, 2000ms, {}, certs.client_tls());
  good.put("/meshrun/tls", "v");
  CHECK(good.range("/meshrun/tls").kvs.at(0).value == "v");
  // A member whose certificate another CA signed is not trusted: the handshake fails, naming the key to check.
  EtcdClient wrong_ca({server.endpoint()}, 2000ms, {}, {true, certs.other_ca, certs.client_crt, certs.client_key});
  CHECK_THROWS_WITH(wrong_ca.range("/meshrun/tls"),
                    Catch::Contains("TLS handshake failed") && Catch::Contains("ca_cert="));
  CHECK_THROWS(EtcdClient({server.endpoint()}, 2000ms, {}, {true, certs.ca, "", ""}).range("/meshrun/tls"));
  CHECK_THROWS(client_for(server).range("/meshrun/tls"));  // plain HTTP to a TLS-only member
  CHECK_THROWS_WITH(EtcdClient({server.endpoint()}, 2000ms, {}, {true, certs.ca, certs.client_key, certs.client_key}),
                    Catch::Contains("ssl_cert=") && Catch::Contains("cannot use it as PEM"));

  // Two agents meet through it (a TLS-only member: plain HTTP fails, above), with torch's spellings of the keys.
  const std::string conf =
      "ca_cert=" + certs.ca + ",ssl_cert=" + certs.client_crt + ",ssl_cert_key=" + certs.client_key;
  auto argv = etcd_agent(server, "tlsjob", "2", {"--rdzv-conf", conf}, {"--no-python", "true"});
  for (auto& arg : argv) {
    if (arg == server.endpoint().to_string()) arg = "https://" + arg;
  }
  two_agents_meet(argv, dir.path());
}

TEST_CASE("meshrun over etcd: two agents meet without a meshrun daemon and run a PyTorch Gloo all_reduce",
          "[etcd][pytorch]") {
  EtcdServer server;
  TempDir dir;
  const std::string marker = unique_marker();
  const auto agent = [&](const std::string& name) {
    return std::make_unique<Process>(
        etcd_agent(server, "gloo2", "2", {"--nproc-per-node", "2"}, {ALLREDUCE_SCRIPT, dir.path()}),
        std::vector<std::string>{venv_path(), marker}, dir.path() + "/" + name);
  };
  auto a = agent("a.out");
  auto b = agent("b.out");
  const int code_a = a->wait(180s);
  const int code_b = b->wait(180s);
  INFO(a->output() << "\n---\n" << b->output());
  REQUIRE(code_a == 0);
  REQUIRE(code_b == 0);
  for (int r = 0; r < 4; ++r) {
    // 1 + 2 + 3 + 4 on every rank of the world of 4.
    const std::string line = read_file(dir.path() + "/rank" + std::to_string(r) + ".txt");
    CHECK(line == std::to_string(r) + " 4 " + std::to_string(r % 2) + " 10\n");
  }
  // The finished run's keys are gone from etcd, so the id can be used again.
  CHECK(client_for(server).range("/meshrun/rdzv/gloo2/", etcd::prefix_end("/meshrun/rdzv/gloo2/")).kvs.empty());
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("meshrun over etcd: a failed worker restarts every node, and each names the root cause", "[etcd]") {
  EtcdServer server;
  TempDir dir;
  const std::string marker = unique_marker();
  // Rank 1 fails once the others are up, in every attempt: one restart, then both give up.
  const auto agent = [&](const std::string& name, const std::string& node_rank) {
    return std::make_unique<Process>(
        etcd_agent(server, "restart2", "2", {"--node-rank", node_rank, "--max-restarts", "1"},
                   {TEST_WORKER_BIN, "fail-rank", "1", "7", dir.path()}),
        std::vector<std::string>{marker}, dir.path() + "/" + name);
  };
  auto a = agent("a.out", "0");
  auto b = agent("b.out", "1");
  const int code_b = b->wait(120s);
  const int code_a = a->wait(120s);
  const std::string out_a = a->output();
  const std::string out_b = b->output();
  INFO(out_a << "\n---\n" << out_b);
  CHECK(code_b == 7);
  CHECK(code_a != 0);
  for (const auto& out : {out_a, out_b}) {
    CHECK_THAT(out, Catch::Contains("restarting the workers (restart 1 of 1)"));
    CHECK_THAT(out, Catch::Contains("root cause") && Catch::Contains("rank 1"));
  }
  CHECK_THAT(out_a, Catch::Contains("the rendezvous asks for a restart"));
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("meshrun over etcd: a duplicate --node-rank is refused, naming both nodes", "[etcd]") {
  EtcdServer server;
  TempDir dir;
  const std::vector<std::string> worker{TEST_WORKER_BIN, "exit", "0"};
  const std::vector<std::string> args{"--node-rank", "0", "--rdzv-conf", "join_timeout=20"};
  Process first(etcd_agent(server, "dup", "2", args, worker), {}, dir.path() + "/first.out");
  // The first holds rank 0 (its claim is in etcd) before the second asks for it.
  const auto end = std::chrono::steady_clock::now() + 20s;
  EtcdClient etcd = client_for(server);
  while (etcd.range("/meshrun/rdzv/dup/r/0/rank/0").kvs.empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);
  }
  auto [code, out] =
      meshrun::testing::run(etcd_agent(server, "dup", "2", args, worker), {}, dir.path() + "/second.out");
  INFO(out);
  CHECK(code != 0);
  CHECK_THAT(out, Catch::Contains("node rank 0") && Catch::Contains("requested by both") &&
                      Catch::Contains("pid " + std::to_string(first.pid())));
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
}

TEST_CASE("meshrun over etcd: no member reachable is a clear error within the join timeout", "[etcd]") {
  TempDir dir;
  const std::string dead1 = "127.0.0.1:" + std::to_string(meshrun::testing::free_port());
  const std::string dead2 = "127.0.0.1:" + std::to_string(meshrun::testing::free_port());
  const auto start = std::chrono::steady_clock::now();
  auto [code, out] =
      meshrun::testing::run({MESHRUN_BIN, "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                             dead1 + "," + dead2, "--rdzv-conf", "join_timeout=3", TEST_WORKER_BIN, "exit", "0"},
                            {}, dir.path() + "/out");
  INFO(out);
  CHECK(code != 0);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  CHECK_THAT(out, Catch::Contains("cannot reach etcd") && Catch::Contains(dead1) && Catch::Contains(dead2));
  // "etcd" is accepted as a spelling of etcd-v3, once, with a note.
  CHECK_THAT(out, Catch::Contains("using etcd-v3"));
}

TEST_CASE("meshrun over etcd: a node that arrives while the round runs is admitted at a free restart", "[etcd]") {
  EtcdServer server;
  TempDir dir;
  const std::string marker = unique_marker();
  // Round 0 runs until stopped; any later round writes its world size and ends.
  const std::string script =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then exec sleep 600; fi; echo $WORLD_SIZE > " + dir.path() +
      "/world.$RANK";
  const auto agent = [&](const std::string& name) {
    return std::make_unique<Process>(
        etcd_agent(server, "grow", "2:3",
                   {"--shutdown-timeout", "2", "--rdzv-conf", "last_call_timeout=1", "--no-python"},
                   {"/bin/sh", "-c", script}),
        std::vector<std::string>{marker}, dir.path() + "/" + name);
  };
  auto a = agent("a.out");
  auto b = agent("b.out");
  // Both run round 0 (closed at the minimum after the last call) before the third arrives.
  EtcdClient etcd = client_for(server);
  const auto end = std::chrono::steady_clock::now() + 60s;
  while (etcd.range("/meshrun/rdzv/grow/r/0/store").kvs.empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);
  }
  auto c = agent("c.out");
  CHECK(c->wait(120s) == 0);
  CHECK(a->wait(60s) == 0);
  CHECK(b->wait(60s) == 0);
  INFO(a->output() << "\n---\n" << b->output() << "\n---\n" << c->output());
  for (int r = 0; r < 3; ++r) CHECK(read_file(dir.path() + "/world." + std::to_string(r)) == "3\n");
  // Admitting a node is not a failure: nobody spent a restart on it (--max-restarts is 0).
  CHECK_THAT(a->output(), Catch::Contains("admit a waiting node"));
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

TEST_CASE("meshrun over etcd: a spare still waiting when the run ends well exits 0, and a later launch starts afresh",
          "[etcd]") {
  EtcdServer server;
  TempDir dir;
  const std::string marker = unique_marker();
  // The worker waits for the test's go, then notes that it ran.
  const std::string script =
      "while [ ! -f " + dir.path() + "/go ]; do sleep 0.1; done; echo ran >> " + dir.path() + "/ran";
  const auto agent = [&](const std::string& name) {
    return std::make_unique<Process>(etcd_agent(server, "spare", "1", {"--no-python"}, {"/bin/sh", "-c", script}),
                                     std::vector<std::string>{marker}, dir.path() + "/" + name);
  };
  auto a = agent("a.out");
  EtcdClient etcd = client_for(server);
  auto end = std::chrono::steady_clock::now() + 60s;
  while (etcd.range("/meshrun/rdzv/spare/r/0/store").kvs.empty() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);
  }
  auto spare = agent("spare.out");
  end = std::chrono::steady_clock::now() + 60s;
  while (spare->output().find("is full") == std::string::npos && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE_THAT(spare->output(), Catch::Contains("this node joins when the job next restarts"));
  std::ofstream(dir.path() + "/go").put('\n');
  CHECK(a->wait(60s) == 0);
  CHECK(spare->wait(60s) == 0);
  INFO(a->output() << "\n---\n" << spare->output());
  CHECK_THAT(spare->output(), Catch::Contains("run 'spare' finished while this node waited as a hot spare"));
  CHECK(read_file(dir.path() + "/ran") == "ran\n");  // the spare started no job of its own
  // The id again, later: a new job, not a spare of the old one.
  auto later = agent("later.out");
  CHECK(later->wait(60s) == 0);
  INFO(later->output());
  CHECK(read_file(dir.path() + "/ran") == "ran\nran\n");
  CHECK(meshrun::testing::wait_no_processes_with_env(marker).empty());
}

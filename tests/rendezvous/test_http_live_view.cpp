// The daemon's HTTP live view end to end: the real meshrun-rendezvous with --http-port 0, a run made by a
// real agent process (progress_agent, or meshrun itself with PyTorch workers), and HTTP over loopback.
#include <catch2/catch.hpp>
#include <chrono>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "rendezvous/http_client.hpp"
#include "support/daemon_process.hpp"
#include "support/subprocess.hpp"

using meshrun::testing::http_exchange;
using meshrun::testing::http_get;
using meshrun::testing::HttpResponse;
using meshrun::testing::line_after;
using meshrun::testing::Process;
using meshrun::testing::TempDir;
using nlohmann::json;

namespace {

// A meshrun-rendezvous process on 127.0.0.1 with the live view on a free port.
class Daemon : public meshrun::testing::DaemonProcess {
 public:
  explicit Daemon(const TempDir& dir, std::vector<std::string> extra = {})
      : DaemonProcess(DAEMON_BIN, with_http(std::move(extra)), dir.path() + "/daemon") {}

 private:
  static std::vector<std::string> with_http(std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--http-port", "0"});
    return extra;
  }
};

json get_json(uint16_t port, const std::string& path) {
  const auto r = http_get(port, path);
  INFO(path << " answered: " << r.raw);
  REQUIRE(r.status == 200);
  REQUIRE(r.header("content-type") == "application/json");
  return json::parse(r.body);
}

// All ranks of `run` from a status JSON, by rank.
std::map<int, json> ranks_of(const json& run) {
  std::map<int, json> out;
  for (const auto& node : run.at("nodes")) {
    for (const auto& r : node.at("ranks")) out[r.at("rank").get<int>()] = r;
  }
  return out;
}

// Polls /api/status until run `run_id` has `ranks` ranks past step 1 (and, with `straggler`, that rank flagged
// a straggler); returns that run (null on timeout).
json wait_for_ranks(uint16_t port, const std::string& run_id, size_t ranks, int min_step = 2, int straggler = -1) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < end) {
    const auto status = json::parse(http_get(port, "/api/status").body, nullptr, false);
    for (const auto& run : status.is_object() ? status.at("runs") : json::array()) {
      if (run.at("run_id") != run_id) continue;
      const auto by_rank = ranks_of(run);
      size_t moving = 0;
      for (const auto& [rank, r] : by_rank) moving += r.at("step").get<int>() >= min_step ? 1 : 0;
      const auto flagged = by_rank.find(straggler);
      const bool named = straggler < 0 || (flagged != by_rank.end() && flagged->second.value("straggler", false));
      if (moving >= ranks && named) return run;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return nullptr;
}

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses Prometheus text format 0.0.4 strictly enough for a test: every sample line is
// `name{label="value",...} number`, and its family had a HELP and a TYPE line before it.
std::vector<MetricSample> parse_prometheus(const std::string& text) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([-+0-9.eEaNInf]+)$)");
  static const std::regex kLabel(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?)re");
  std::set<std::string> helped, typed;
  std::vector<MetricSample> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    INFO("line: " << line);
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const auto name = line.substr(7, line.find(' ', 7) - 7);
      const auto type = line.substr(line.find(' ', 7) + 1);
      CHECK((type == "gauge" || type == "counter"));
      CHECK(helped.count(name) == 1);
      typed.insert(name);
      continue;
    }
    std::smatch m;
    REQUIRE(std::regex_match(line, m, kSample));
    MetricSample s{m[1], {}, std::stod(m[4])};
    CHECK(typed.count(s.name) == 1);
    std::string labels = m[3];
    for (std::smatch l; std::regex_search(labels, l, kLabel); labels = l.suffix()) s.labels[l[1]] = l[2];
    samples.push_back(std::move(s));
  }
  return samples;
}

const MetricSample* find_sample(const std::vector<MetricSample>& samples, const std::string& name,
                                const std::map<std::string, std::string>& labels) {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match = match && s.labels.count(k) && s.labels.at(k) == v;
    if (match) return &s;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("the live view serves health, the status JSON, history and Prometheus metrics of a run with ranks",
          "[http]") {
  TempDir dir;
  Daemon daemon(dir);
  REQUIRE(daemon.http_port() != 0);
  Process agent({PROGRESS_AGENT_BIN, daemon.endpoint(), "live", "node-a", "4", "--hung-rank", "1", "--slow-rank", "2",
                 "--late-rank", "3", "--restart-hung"},
                {}, dir.path() + "/agent");
  // The slow rank is named once most of its readings of 5 s and 20 steps are over the threshold
  // (StragglerFilter).
  const json run = wait_for_ranks(daemon.http_port(), "live", 2, 40, 2);
  INFO("daemon: " << daemon.log() << "\nagent: " << agent.output());
  REQUIRE(run.is_object());
  const uint16_t port = daemon.http_port();

  SECTION("/health answers 200 with what it checked") {
    const auto r = http_get(port, "/health");
    REQUIRE(r.status == 200);
    const auto health = json::parse(r.body);
    CHECK(health.at("status") == "ok");
    CHECK(health.at("uptime_s").get<double>() > 0);
    CHECK(health.at("connections").get<int>() >= 1);  // the agent's
    CHECK(health.at("answer_ms").get<double>() < 1000);
    CHECK(health.contains("io_lag_ms"));
  }
  SECTION("/api/status is the JSON of status --json, with ranks, flags and restarts") {
    const auto status = get_json(port, "/api/status");
    const auto [code, text] = meshrun::testing::run({DAEMON_BIN, "status", "--endpoint", daemon.endpoint(), "--json"},
                                                    {}, dir.path() + "/status");
    REQUIRE(code == 0);
    const auto cli = json::parse(text);
    std::set<std::string> http_keys, cli_keys;
    for (const auto& [k, v] : status.items()) http_keys.insert(k);
    for (const auto& [k, v] : cli.items()) cli_keys.insert(k);
    CHECK(http_keys == cli_keys);
    REQUIRE(status.at("runs").size() == 1);
    const auto& r = status.at("runs")[0];
    CHECK(r.at("run_id") == "live");
    CHECK(r.at("round") == 1);
    CHECK(r.at("restarts_by_cause").at("hung") == 1);
    CHECK(r.at("restarts").at(0).at("cause") == "hung");
    const auto ranks = ranks_of(r);
    REQUIRE(ranks.size() == 4);
    CHECK(ranks.at(1).at("hung") == true);
    CHECK(ranks.at(2).at("straggler") == true);
    CHECK(ranks.at(0).at("hung") == false);
    CHECK(ranks.at(3).at("late") == true);
    CHECK_THAT(ranks.at(3).at("late_reason").get<std::string>(), Catch::StartsWith("rank 3 (node-a) is late: "));
    CHECK(ranks.at(0).at("late") == false);
  }
  SECTION("/metrics is Prometheus text with the run's ranks") {
    const auto r = http_get(port, "/metrics");
    REQUIRE(r.status == 200);
    CHECK_THAT(r.header("content-type"), Catch::StartsWith("text/plain; version=0.0.4"));
    const auto samples = parse_prometheus(r.body);
    const auto* up = find_sample(samples, "meshrun_rendezvous_up", {});
    REQUIRE(up != nullptr);
    CHECK(up->value == 1);
    const auto* step = find_sample(samples, "meshrun_rank_step", {{"run", "live"}, {"rank", "0"}});
    REQUIRE(step != nullptr);
    CHECK(step->value >= 2);
    CHECK(step->labels.at("host") == "node-a");
    const auto* hung = find_sample(samples, "meshrun_rank_hung", {{"run", "live"}, {"rank", "1"}});
    REQUIRE(hung != nullptr);
    CHECK(hung->value == 1);
    const auto* slow = find_sample(samples, "meshrun_rank_straggler", {{"run", "live"}, {"rank", "2"}});
    REQUIRE(slow != nullptr);
    CHECK(slow->value == 1);
    const auto* late = find_sample(samples, "meshrun_rank_late", {{"run", "live"}, {"rank", "3"}});
    REQUIRE(late != nullptr);
    CHECK(late->value == 1);
    const auto* on_time = find_sample(samples, "meshrun_rank_late", {{"run", "live"}, {"rank", "0"}});
    REQUIRE(on_time != nullptr);
    CHECK(on_time->value == 0);
    const auto* restarts = find_sample(samples, "meshrun_restarts_total", {{"run", "live"}, {"cause", "hung"}});
    REQUIRE(restarts != nullptr);
    CHECK(restarts->value == 1);
    const auto* alive = find_sample(samples, "meshrun_nodes", {{"run", "live"}, {"state", "alive"}});
    REQUIRE(alive != nullptr);
    CHECK(alive->value == 1);
    CHECK(find_sample(samples, "meshrun_store_connections", {}) != nullptr);
    CHECK(find_sample(samples, "meshrun_run_keys", {{"run", "live"}}) != nullptr);
  }
  SECTION("the history of a run grows, bounded, and unknown runs are 404") {
    json history;
    for (int i = 0; i < 100; ++i) {
      history = get_json(port, "/api/runs/live/history");
      if (history.at("samples").size() >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    REQUIRE(history.at("samples").size() >= 2);
    const auto& last = history.at("samples").back();
    CHECK(last.at("round") == 1);
    CHECK(last.at("loss").get<double>() > 0);
    CHECK(last.at("tokens_per_s").get<double>() == 1200 + 1200 + 400 + 1200);  // ranks 0, 1 (hung), 2 (slow), 3 (late)
    CHECK(history.at("capacity").get<int>() >= 100);
    CHECK(get_json(port, "/api/history").at("runs").contains("live"));
    CHECK(http_get(port, "/api/runs/nope/history").status == 404);
  }
  SECTION("the page is compiled in and loads nothing from elsewhere") {
    const auto r = http_get(port, "/");
    REQUIRE(r.status == 200);
    CHECK_THAT(r.header("content-type"), Catch::StartsWith("text/html"));
    CHECK_THAT(r.body, Catch::Contains("api/status"));
    CHECK_THAT(r.body,
               !Catch::Contains("src=\"http") && !Catch::Contains("href=\"http") && !Catch::Contains("@import"));
  }
}

TEST_CASE("the live view answers 404, 405 and 400 and keeps serving", "[http]") {
  TempDir dir;
  Daemon daemon(dir);
  const uint16_t port = daemon.http_port();
  REQUIRE(port != 0);

  CHECK(http_get(port, "/no/such/page").status == 404);
  // Keep-alive: the connection stays open after the 405, so read only until the reply is complete.
  const auto post = http_exchange(port, "POST /api/status HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", true);
  CHECK(post.status == 405);
  CHECK(post.header("allow") == "GET, HEAD");
  const auto del = http_exchange(port, "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(del.status == 405);
  const auto head = http_exchange(port, "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(head.raw.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(head.raw.size() == head.raw.find("\r\n\r\n") + 4);  // headers only

  const auto garbage = http_exchange(port, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 15));
  CHECK(garbage.status == 400);
  CHECK(garbage.closed_by_peer);
  const auto huge_header =
      http_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n");
  CHECK(huge_header.status == 400);
  const auto huge_body =
      http_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + std::string(64 * 1024, 'b'));
  CHECK(huge_body.status == 400);
  const auto bad_version = http_exchange(port, "GET / HTTX/1.1\r\n\r\n");
  CHECK(bad_version.status == 400);
  // A request cut short: the connection is closed without an answer, nothing else happens.
  const auto partial = http_exchange(port, "GET /health HT", false, std::chrono::milliseconds(300));
  CHECK(partial.status == 0);

  CHECK(http_get(port, "/health").status == 200);
  CHECK_THAT(daemon.log(), Catch::Contains("http: bad request from 127.0.0.1"));
}

TEST_CASE("the live view keeps connections alive and closes idle ones", "[http]") {
  TempDir dir;
  Daemon daemon(dir, {"--http-idle-timeout", "1"});
  const uint16_t port = daemon.http_port();
  REQUIRE(port != 0);
  // Two requests on one connection (pipelined): two answers, then the connection is closed as asked.
  const auto two = http_exchange(port,
                                 "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /api/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  size_t answers = 0;
  for (size_t at = two.raw.find("HTTP/1.1 200"); at != std::string::npos; at = two.raw.find("HTTP/1.1 200", at + 1)) {
    ++answers;
  }
  CHECK(answers == 2);
  CHECK(two.closed_by_peer);
  // A keep-alive connection that stays silent is closed after the idle timeout (1 s here).
  const auto t0 = std::chrono::steady_clock::now();
  const auto idle = http_exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", false, std::chrono::seconds(10));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(idle.status == 200);
  CHECK(idle.closed_by_peer);
  CHECK(waited > 0.8);
  CHECK(waited < 5);
}

TEST_CASE("with --allow 10.0.0.0/8 an HTTP peer on 127.0.0.1 is closed without a response", "[http]") {
  TempDir dir;
  Daemon daemon(dir, {"--allow", "10.0.0.0/8"});
  REQUIRE(daemon.http_port() != 0);
  const auto r = http_get(daemon.http_port(), "/health");
  CHECK(r.status == 0);
  CHECK(r.raw.empty());
  CHECK(r.closed_by_peer);
  for (int i = 0; i < 100 && daemon.log().find("peer not allowed") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK_THAT(daemon.log(), Catch::Contains("http: closing connection from 127.0.0.1"));
  CHECK_THAT(daemon.log(), Catch::Contains("peer not allowed by --allow"));
}

TEST_CASE("a real meshrun job's progress beats show in the live view's status and metrics", "[http][pytorch]") {
  const std::string venv = VENV_BIN;
  REQUIRE(meshrun::testing::file_exists(venv + "/python"));  // scripts/setup.sh makes it
  TempDir dir;
  Daemon daemon(dir);
  REQUIRE(daemon.http_port() != 0);
  const char* path = std::getenv("PATH");
  Process job({MESHRUN_BIN, "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", daemon.endpoint(),
               "--rdzv-id", "beats", PROGRESS_JOB, "400", "0.05"},
              {"PATH=" + venv + ":" + (path ? path : "/usr/bin:/bin"), "PROGRESS_JOB_OUT=" + dir.path()},
              dir.path() + "/job");
  const json run = wait_for_ranks(daemon.http_port(), "beats", 2, 3);
  INFO("job: " << job.output());
  REQUIRE(run.is_object());
  CHECK(ranks_of(run).at(1).at("loss").get<double>() > 0);
  const auto samples = parse_prometheus(http_get(daemon.http_port(), "/metrics").body);
  const auto* step = find_sample(samples, "meshrun_rank_step", {{"run", "beats"}, {"rank", "1"}});
  REQUIRE(step != nullptr);
  CHECK(step->value >= 3);
  job.signal(SIGTERM);
  job.wait(std::chrono::seconds(60));
}

TEST_CASE("a hosting meshrun serves the live view with --rdzv-conf http_port", "[http][pytorch]") {
  const std::string venv = VENV_BIN;
  REQUIRE(meshrun::testing::file_exists(venv + "/python"));
  TempDir dir;
  const char* path = std::getenv("PATH");
  Process job(
      {MESHRUN_BIN, "--standalone", "--nproc-per-node", "2", "--rdzv-conf", "http_port=0", PROGRESS_JOB, "400", "0.05"},
      {"PATH=" + venv + ":" + (path ? path : "/usr/bin:/bin"), "PROGRESS_JOB_OUT=" + dir.path()}, dir.path() + "/job");
  uint16_t port = 0;
  for (int i = 0; i < 3000 && port == 0; ++i) {
    const auto url = line_after(job.output(), "meshrun: live view of the job on http://");
    if (!url.empty()) port = static_cast<uint16_t>(std::stoi(url.substr(url.find(':') + 1)));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO("job: " << job.output());
  REQUIRE(port != 0);
  CHECK(http_get(port, "/health").status == 200);
  json runs = json::array();  // the page is up before the agent joined: wait for its run
  for (int i = 0; i < 300 && runs.empty(); ++i) {
    runs = get_json(port, "/api/status").value("runs", json::array());
    if (runs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(runs.size() == 1);  // --standalone: the private daemon serves this job alone, its id random
  const json run = wait_for_ranks(port, runs[0].at("run_id").get<std::string>(), 2, 3);
  REQUIRE(run.is_object());
  CHECK(ranks_of(run).size() == 2);
  job.signal(SIGTERM);
  job.wait(std::chrono::seconds(60));
}

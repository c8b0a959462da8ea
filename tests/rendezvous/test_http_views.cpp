// The live view's pure parts: routes, /health's verdict, Prometheus text and the bounded run history.
#include <catch2/catch.hpp>

#include "rendezvous/http/health.hpp"
#include "rendezvous/http/metrics.hpp"
#include "rendezvous/http/routes.hpp"
#include "rendezvous/http/run_history.hpp"

using namespace meshrun::rendezvous::http;
using meshrun::proto::RankProgress;
using meshrun::proto::RunStatus;

namespace {

RunStatus run_at(int64_t step, int64_t round = 0) {
  // Built rather than assigned from literals: g++ 12 -O3 warns (-Wrestrict) on those, falsely (GCC PR 105329).
  RunStatus run;
  run.run_id = std::string(1, 'r');
  run.round = round;
  meshrun::proto::NodeInfo node;
  node.host = std::string(1, 'h');
  node.group_rank = 0;
  for (int rank = 0; rank < 2; ++rank) {
    RankProgress p;
    p.rank = rank;
    p.step = step;
    p.loss = rank == 0 ? 1.0 : 3.0;
    p.tokens_per_s = 100;
    node.ranks.push_back(p);
  }
  run.nodes.push_back(node);
  return run;
}

}  // namespace

TEST_CASE("live view routes: paths, queries, percent-encoded run ids", "[http]") {
  CHECK(parse_route("/").resource == Resource::kPage);
  CHECK(parse_route("/api/status?x=1").resource == Resource::kStatus);
  CHECK(parse_route("/metrics").resource == Resource::kMetrics);
  CHECK(parse_route("/health").resource == Resource::kHealth);
  CHECK(parse_route("/api/history").resource == Resource::kHistory);
  const auto run = parse_route("/api/runs/job%201%2Fb/history");
  CHECK(run.resource == Resource::kRunHistory);
  CHECK(run.run_id == "job 1/b");
  CHECK(parse_route("/api/runs/a/b/history").resource == Resource::kNotFound);
  CHECK(parse_route("/api/runs/%zz/history").resource == Resource::kNotFound);
  CHECK(parse_route("/api/runs//history").resource == Resource::kNotFound);
  CHECK(parse_route("/favicon.ico").resource == Resource::kNotFound);
  CHECK(render(parse_route("/nope"), nullptr, 0, 0).status == 404);
  CHECK(method_not_allowed("POST").status == 405);
}

TEST_CASE("health is 503 when the io thread does not answer or ran late, 200 otherwise", "[http]") {
  const auto silent = judge_health(nullptr, 1.0, 1);
  CHECK_FALSE(silent.healthy);
  CHECK_THAT(silent.body.at("reason").get<std::string>(), Catch::Contains("did not answer within 1000 ms"));
  LiveSnapshot snapshot;
  CHECK(judge_health(&snapshot, 0.001, 1).healthy);
  snapshot.io_lag_s = 2.5;
  const auto late = judge_health(&snapshot, 0.001, 1);
  CHECK_FALSE(late.healthy);
  CHECK_THAT(late.body.at("reason").get<std::string>(), Catch::Contains("2500 ms late"));
  CHECK(render(Route{Resource::kHealth, ""}, &snapshot, 0.001, 1).status == 503);
  CHECK(render(Route{Resource::kStatus, ""}, nullptr, 1.0, 1).status == 503);
}

TEST_CASE("Prometheus text escapes label values and labels each rank", "[http]") {
  CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  LiveSnapshot snapshot;
  auto run = run_at(7);
  run.run_id = std::string("we\"ird");
  run.restarts_by_cause["hung"] = 2;
  snapshot.status.runs.push_back(run);
  const auto text = prometheus_text(snapshot, 3);
  CHECK_THAT(text, Catch::Contains("# TYPE meshrun_rank_step gauge\n"));
  CHECK_THAT(text, Catch::Contains("meshrun_rank_step{run=\"we\\\"ird\",node=\"0\",host=\"h\",rank=\"1\"} 7\n"));
  CHECK_THAT(text, Catch::Contains("meshrun_restarts_total{run=\"we\\\"ird\",cause=\"hung\"} 2\n"));
  CHECK_THAT(text, Catch::Contains("meshrun_http_connections 3\n"));
}

TEST_CASE("a run's history samples progress, spans the whole run and stays bounded", "[http]") {
  RunHistory history(8);
  history.record(RunStatus{}, 0);  // no progress: nothing
  CHECK(history.samples(0).empty());
  for (int64_t step = 1; step <= 100; ++step) history.record(run_at(step), static_cast<double>(step));
  const auto samples = history.samples(100);
  CHECK(samples.size() < 8);
  CHECK(history.stride() > 1);
  CHECK(samples.front().step == 1);
  CHECK(samples.back().step >= 100 - history.stride());
  CHECK(samples.back().loss == 2.0);  // the mean of 1 and 3
  CHECK(samples.back().tokens_per_s == 200);
  history.record(run_at(1, 1), 101);  // a restart: steps go back, the new round is sampled at once
  CHECK(history.samples(101).back().round == 1);
  const auto j = history_json("r", history, 101);
  CHECK(j.at("run_id") == "r");
  CHECK(j.at("samples").back().at("step") == 1);
}

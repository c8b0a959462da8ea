// The live view's resources: which one a request target names, and the reply each gives. Pure (no Beast,
// no sockets): HttpSession parses the request, asks the io thread for a LiveSnapshot when the resource
// needs one, and writes the Reply.
//
//   GET /                       the live page (page.html, compiled in)
//   GET /api/status             the JSON `meshrun-rendezvous status --json` prints
//   GET /api/history            {"runs": {RUN_ID: history}} for every run (run_history.hpp)
//   GET /api/runs/RUN_ID/history  one run's history (RUN_ID percent-encoded); 404 for an unknown run
//   GET /metrics                Prometheus text (metrics.hpp)
//   GET /health                 200 or 503 with JSON (health.hpp)
// HEAD works wherever GET does; any other method gets 405; any other path 404.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rendezvous/http/live_state.hpp"

namespace meshrun::rendezvous::http {

enum class Resource { kPage, kStatus, kHistory, kRunHistory, kMetrics, kHealth, kNotFound };

struct Route {
  Resource resource = Resource::kNotFound;
  std::string run_id;  // kRunHistory only, percent-decoded
};

/// A reply before it becomes HTTP: status code, Content-Type and body.
struct Reply {
  unsigned status = 200;
  std::string content_type;
  std::string body;
};

/// The resource a request target ("/path?query") names; the query is ignored.
Route parse_route(std::string_view target);
/// True for the resources rendered from daemon state (everything but the page and 404).
bool needs_snapshot(Resource resource);
/// The reply for `route`. `snapshot` is null when the io thread did not answer in time (state resources
/// then answer 503); `answer_s` is how long the io thread took.
Reply render(const Route& route, const LiveSnapshot* snapshot, double answer_s, size_t http_connections);
/// 405, naming the methods this server answers.
Reply method_not_allowed(std::string_view method);
/// 400 for a request that could not be parsed (or was too large), naming why.
Reply bad_request(std::string_view why);

}  // namespace meshrun::rendezvous::http

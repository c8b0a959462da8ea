#include "rendezvous/http/routes.hpp"

#include <optional>

#include <nlohmann/json.hpp>

#include "rendezvous/http/health.hpp"
#include "rendezvous/http/metrics.hpp"
#include "rendezvous/http/page.hpp"

namespace meshrun::rendezvous::http {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kText = "text/plain; charset=utf-8";
constexpr std::string_view kRunsPrefix = "/api/runs/";
constexpr std::string_view kHistorySuffix = "/history";

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int value = 0;
    for (size_t k = 1; k <= 2; ++k) {
      const char c = text[i + k];
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

Reply json_reply(const nlohmann::json& j, unsigned status = 200) {
  // Replace invalid UTF-8 (run ids and hosts come from clients) rather than throw.
  return Reply{status, kJson, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

Reply not_found(std::string_view what) {
  return json_reply({{"error", std::string(what) + " (try /, /api/status, /api/history, /metrics, /health)"}}, 404);
}

Reply history_of_all(const LiveSnapshot& s) {
  nlohmann::json runs = nlohmann::json::object();
  for (const auto& [run_id, history] : s.history) runs[run_id] = history_json(run_id, history, s.now_s);
  return json_reply({{"runs", runs}});
}

Reply history_of(const LiveSnapshot& s, const std::string& run_id) {
  auto it = s.history.find(run_id);
  if (it == s.history.end()) return not_found("no run '" + run_id + "' on this daemon");
  return json_reply(history_json(run_id, it->second, s.now_s));
}

}  // namespace

Route parse_route(std::string_view target) {
  const auto path = target.substr(0, target.find_first_of("?#"));
  if (path == "/" || path == "/index.html") return {Resource::kPage, ""};
  if (path == "/api/status") return {Resource::kStatus, ""};
  if (path == "/api/history") return {Resource::kHistory, ""};
  if (path == "/metrics") return {Resource::kMetrics, ""};
  if (path == "/health") return {Resource::kHealth, ""};
  if (path.size() > kRunsPrefix.size() + kHistorySuffix.size() && path.substr(0, kRunsPrefix.size()) == kRunsPrefix &&
      path.substr(path.size() - kHistorySuffix.size()) == kHistorySuffix) {
    const auto encoded = path.substr(kRunsPrefix.size(), path.size() - kRunsPrefix.size() - kHistorySuffix.size());
    if (auto run_id = percent_decode(encoded); run_id && encoded.find('/') == std::string_view::npos) {
      return {Resource::kRunHistory, *run_id};
    }
  }
  return {Resource::kNotFound, ""};
}

bool needs_snapshot(Resource resource) { return resource != Resource::kPage && resource != Resource::kNotFound; }

Reply render(const Route& route, const LiveSnapshot* snapshot, double answer_s, size_t http_connections) {
  if (route.resource == Resource::kPage) return Reply{200, "text/html; charset=utf-8", std::string(page_html())};
  if (route.resource == Resource::kNotFound) return not_found("no such page");
  if (route.resource == Resource::kHealth) {
    const Health health = judge_health(snapshot, answer_s, http_connections);
    return json_reply(health.body, health.healthy ? 200 : 503);
  }
  if (snapshot == nullptr) {
    return json_reply({{"error", "the daemon's io thread did not answer within " +
                                     std::to_string(kHealthDeadline.count()) + " ms; see /health"}},
                      503);
  }
  switch (route.resource) {
    case Resource::kStatus: return json_reply(snapshot->status);
    case Resource::kHistory: return history_of_all(*snapshot);
    case Resource::kRunHistory: return history_of(*snapshot, route.run_id);
    case Resource::kMetrics: return Reply{200, kPrometheusContentType, prometheus_text(*snapshot, http_connections)};
    default: return not_found("no such page");
  }
}

Reply method_not_allowed(std::string_view method) {
  return Reply{405, kText, "method " + std::string(method) + " is not allowed: this server answers GET and HEAD\n"};
}

Reply bad_request(std::string_view why) { return Reply{400, kText, "bad request: " + std::string(why) + "\n"}; }

}  // namespace meshrun::rendezvous::http

#include "launcher/etcd/etcd_client.hpp"

#include <functional>
#include <nlohmann/json.hpp>

#include "common/base64.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

namespace meshrun::launcher::etcd {
namespace {

using json = nlohmann::json;

/// etcd answered, but with a server-side failure a different member may not have (no leader, stopping).
class MemberUnavailable : public NetworkError {
 public:
  using NetworkError::NetworkError;
};

int64_t number(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) return 0;  // the gateway omits zeros
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->get<int64_t>();
}

std::string text(const json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() ? std::string() : base64_decode(it->get<std::string>());
}

KeyValue parse_kv(const json& j) {
  return KeyValue{.key = text(j, "key"),
                  .value = text(j, "value"),
                  .create_revision = number(j, "create_revision"),
                  .mod_revision = number(j, "mod_revision"),
                  .version = number(j, "version"),
                  .lease = number(j, "lease")};
}

RangeResult parse_range(const json& j) {
  RangeResult r;
  if (const auto it = j.find("kvs"); it != j.end()) {
    for (const auto& kv : *it) r.kvs.push_back(parse_kv(kv));
  }
  r.count = number(j, "count");
  if (const auto it = j.find("header"); it != j.end()) r.revision = number(*it, "revision");
  return r;
}

json operation_json(const Operation& op) {
  json body{{"key", base64_encode(op.key)}};
  if (!op.range_end.empty()) body["range_end"] = base64_encode(op.range_end);
  switch (op.kind) {
    case Operation::Kind::kPut:
      body["value"] = base64_encode(op.value);
      if (op.lease != 0) body["lease"] = std::to_string(op.lease);
      return json{{"request_put", body}};
    case Operation::Kind::kRange: return json{{"request_range", body}};
    case Operation::Kind::kDelete: return json{{"request_delete_range", body}};
  }
  return json{};
}

json compare_json(const Compare& c) {
  static constexpr const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE"};
  static constexpr const char* kFields[] = {"version", "create_revision", "mod_revision", "value"};
  static constexpr const char* kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  const auto target = static_cast<size_t>(c.target);
  json body{
      {"key", base64_encode(c.key)}, {"target", kTargets[target]}, {"result", kResults[static_cast<size_t>(c.result)]}};
  if (!c.range_end.empty()) body["range_end"] = base64_encode(c.range_end);
  if (c.target == Compare::Target::kValue) {
    body[kFields[target]] = base64_encode(c.value);
  } else {
    body[kFields[target]] = std::to_string(c.number);
  }
  return body;
}

std::string error_message(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (const auto it = j.find("message"); it != j.end() && it->is_string()) return it->get<std::string>();
    if (const auto it = j.find("error"); it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return body.substr(0, 200);
}

// A 5xx answer is the member's trouble (no leader, stopping): the next member may do; any other
// refusal is etcd's answer to the request itself.
// etcd says the auth token a call carried is no longer valid (expired, or a restarted member forgot it).
bool token_rejected(const GatewayReply& response) {
  return response.status == 401 && response.body.find("invalid auth token") != std::string::npos;
}

void check_status(const GatewayReply& response, const Endpoint& endpoint, const std::string& path) {
  const unsigned status = response.status;
  if (status >= 500) throw MemberUnavailable("HTTP " + std::to_string(status) + ": " + error_message(response.body));
  if (status != 200) {
    throw RemoteError("etcd at " + endpoint.to_string() + " refused " + path + ": " + error_message(response.body));
  }
}

// The gateway streams one JSON object per line; returns the watch's events once a line carries some.
std::optional<std::vector<WatchEvent>> events_in(const std::string& body, size_t& consumed) {
  for (size_t end = body.find('\n', consumed); end != std::string::npos; end = body.find('\n', consumed)) {
    const json line = json::parse(body.substr(consumed, end - consumed));
    consumed = end + 1;
    const json& result = line.contains("result") ? line["result"] : line;
    if (number(result, "compact_revision") != 0) {
      throw ProtocolError("etcd compacted the revisions a watch needed (compact revision " +
                          std::to_string(number(result, "compact_revision")) + ")");
    }
    if (const auto it = result.find("events"); it != result.end() && !it->empty()) {
      std::vector<WatchEvent> events;
      for (const auto& e : *it) {
        const bool deleted = e.value("type", std::string()) == "DELETE";
        events.push_back(WatchEvent{deleted ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut, parse_kv(e["kv"])});
      }
      return events;
    }
  }
  return std::nullopt;
}

}  // namespace

Compare mod_revision_is(const std::string& key, int64_t revision) {
  Compare c;
  c.key = key;
  c.target = Compare::Target::kModRevision;
  c.number = revision;
  return c;
}

Compare absent(const std::string& key) {
  Compare c;
  c.key = key;
  c.target = Compare::Target::kCreateRevision;
  c.number = 0;
  return c;
}

Compare unchanged_since(const std::string& key, const std::string& range_end, int64_t revision) {
  Compare c = mod_revision_is(key, revision + 1);
  c.range_end = range_end;
  c.result = Compare::Result::kLess;
  return c;
}

Operation put_op(const std::string& key, const std::string& value, int64_t lease) {
  Operation op;
  op.kind = Operation::Kind::kPut;
  op.key = key;
  op.value = value;
  op.lease = lease;
  return op;
}

Operation range_op(const std::string& key, const std::string& range_end) {
  Operation op;
  op.kind = Operation::Kind::kRange;
  op.key = key;
  op.range_end = range_end;
  return op;
}

Operation delete_op(const std::string& key, const std::string& range_end) {
  Operation op = range_op(key, range_end);
  op.kind = Operation::Kind::kDelete;
  return op;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout, EtcdCredentials credentials,
                       const EtcdTls& tls)
    : endpoints_(std::move(endpoints)),
      timeout_(timeout),
      credentials_(std::move(credentials)),
      tls_(make_gateway_tls(tls)) {
  if (endpoints_.empty()) throw UsageError("the etcd backend needs --rdzv-endpoint host:port[,host:port...]");
}

std::string EtcdClient::endpoints_text() const {
  std::vector<std::string> names;
  for (const auto& e : endpoints_) names.push_back(e.to_string());
  return join(names, ",");
}

std::string EtcdClient::post(const std::string& path, const std::string& body) {
  std::string failures;
  for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const size_t index = (current_ + attempt) % endpoints_.size();
    const Endpoint& endpoint = endpoints_[index];
    try {
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      auto response = post_to_gateway(call(endpoint, deadline, deadline), path, body, nullptr);
      if (token_rejected(response)) {
        auth_token_.clear();  // once: a fresh token, the same member
        response = post_to_gateway(call(endpoint, deadline, deadline), path, body, nullptr);
      }
      check_status(response, endpoint, path);
      current_ = index;
      return std::move(response.body);
    } catch (const RemoteError&) {
      throw;
    } catch (const Error& e) {
      failures += (failures.empty() ? "" : "; ") + endpoint.to_string() + ": " + e.what();
    }
  }
  throw NetworkError("no etcd endpoint answered (" + failures + ")");
}

GatewayCall EtcdClient::call(const Endpoint& endpoint, GatewayDeadline send_deadline, GatewayDeadline deadline) {
  return GatewayCall{endpoint, tls_.get(), send_deadline, deadline, authorization(endpoint)};
}

std::string EtcdClient::authorization(const Endpoint& endpoint) {
  if (credentials_.user.empty() || !auth_token_.empty()) return auth_token_;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  const std::string body = json{{"name", credentials_.user}, {"password", credentials_.password}}.dump();
  const auto response = post_to_gateway(GatewayCall{endpoint, tls_.get(), deadline, deadline, ""},
                                        "/v3/auth/authenticate", body, nullptr);
  if (response.status >= 500) throw MemberUnavailable("HTTP " + std::to_string(response.status));
  if (response.status != 200) {
    throw RemoteError("etcd at " + endpoint.to_string() + " refused user '" + credentials_.user +
                      "': " + error_message(response.body) +
                      " (check --rdzv-conf username= and password_file=, and that etcd's auth is on for that user)");
  }
  const json reply = json::parse(response.body, nullptr, false);
  if (!reply.is_object() || !reply.contains("token") || !reply["token"].is_string())
    throw ProtocolError("etcd at " + endpoint.to_string() + " authenticated '" + credentials_.user +
                        "' without a token");
  auth_token_ = reply["token"].get<std::string>();
  return auth_token_;
}

RangeResult EtcdClient::range(const std::string& key, const std::string& range_end, bool count_only) {
  json body{{"key", base64_encode(key)}};
  if (!range_end.empty()) body["range_end"] = base64_encode(range_end);
  if (count_only) body["count_only"] = true;
  return parse_range(json::parse(post("/v3/kv/range", body.dump())));
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  const json reply = json::parse(post("/v3/kv/put", body.dump()));
  return number(reply["header"], "revision");
}

TxnResult EtcdClient::txn(const std::vector<Compare>& compares, const std::vector<Operation>& success,
                          const std::vector<Operation>& failure) {
  json body{{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compares) body["compare"].push_back(compare_json(c));
  for (const auto& op : success) body["success"].push_back(operation_json(op));
  for (const auto& op : failure) body["failure"].push_back(operation_json(op));
  const json reply = json::parse(post("/v3/kv/txn", body.dump()));
  TxnResult result;
  result.succeeded = reply.value("succeeded", false);
  result.revision = number(reply["header"], "revision");
  if (const auto it = reply.find("responses"); it != reply.end()) {
    for (const auto& r : *it) {
      if (const auto range = r.find("response_range"); range != r.end()) {
        result.ranges.push_back(parse_range(*range));
        result.ranges.back().revision = result.revision;
      }
    }
  }
  return result;
}

int64_t EtcdClient::grant_lease(int64_t ttl_s) {
  const json reply = json::parse(post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
  const int64_t id = number(reply, "ID");
  if (id == 0) throw ProtocolError("etcd granted no lease: " + reply.value("error", reply.dump()));
  return id;
}

int64_t EtcdClient::keep_alive(int64_t lease) {
  const json reply = json::parse(post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  return number(reply.contains("result") ? reply["result"] : reply, "TTL");
}

void EtcdClient::revoke(int64_t lease) noexcept {
  try {
    post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): it expires by itself
  }
}

std::vector<WatchEvent> EtcdClient::watch(const std::string& key, const std::string& range_end, int64_t start_revision,
                                          std::chrono::milliseconds wait) {
  json create{{"key", base64_encode(key)}, {"start_revision", std::to_string(start_revision)}};
  if (!range_end.empty()) create["range_end"] = base64_encode(range_end);
  const std::string body = json{{"create_request", create}}.dump();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string failures;
  for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const size_t index = (current_ + attempt) % endpoints_.size();
    std::optional<std::vector<WatchEvent>> events;
    size_t consumed = 0;
    try {
      const auto response =
          post_to_gateway(call(endpoints_[index], std::chrono::steady_clock::now() + timeout_, deadline), "/v3/watch",
                          body, [&](const std::string& so_far) {
                            events = events_in(so_far, consumed);
                            return events.has_value();
                          });
      check_status(response, endpoints_[index], "/v3/watch");
      current_ = index;
      return events.value_or(std::vector<WatchEvent>{});
    } catch (const TimeoutError&) {
      if (consumed > 0) {  // the watch was created: nothing changed in time
        current_ = index;
        return {};
      }
      failures += (failures.empty() ? "" : "; ") + endpoints_[index].to_string() + ": no answer in time";
    } catch (const NetworkError& e) {
      failures += (failures.empty() ? "" : "; ") + endpoints_[index].to_string() + ": " + e.what();
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  throw NetworkError("no etcd endpoint answered a watch (" + failures + ")");
}

}  // namespace meshrun::launcher::etcd

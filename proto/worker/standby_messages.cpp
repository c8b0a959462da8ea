#include "proto/worker/standby_messages.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

nlohmann::json parse_object(std::string_view text, const char* what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw ProtocolError(std::string(what) + ": not a JSON object");
  return j;
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const char* what) {
  const auto it = j.find(key);
  if (it == j.end()) throw ProtocolError(std::string(what) + ": no '" + key + "'");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ProtocolError(std::string(what) + ": '" + key + "' has the wrong type");
  }
}

}  // namespace

StandbyReady parse_standby_ready(std::string_view text) {
  constexpr const char* kWhat = "standby ready message";
  const auto j = parse_object(text, kWhat);
  StandbyReady r;
  r.ok = field<bool>(j, "ok", kWhat);
  if (r.ok) {
    r.import_s = field<double>(j, "import_s", kWhat);
    r.pss_kb = field<long>(j, "pss_kb", kWhat);
  } else {
    r.error = field<std::string>(j, "error", kWhat);
  }
  return r;
}

std::string format_standby_ready(const StandbyReady& ready) {
  nlohmann::json j{{"ok", ready.ok}};
  if (ready.ok) {
    j["import_s"] = ready.import_s;
    j["pss_kb"] = ready.pss_kb;
  } else {
    j["error"] = ready.error;
  }
  return j.dump();
}

StandbyOrder parse_standby_order(std::string_view text) {
  constexpr const char* kWhat = "standby order";
  const auto j = parse_object(text, kWhat);
  StandbyOrder o;
  o.orig_argv = field<std::vector<std::string>>(j, "orig_argv", kWhat);
  o.module = field<bool>(j, "module", kWhat);
  o.target = field<std::string>(j, "target", kWhat);
  o.args = field<std::vector<std::string>>(j, "args", kWhat);
  const auto env = field<nlohmann::json>(j, "env", kWhat);
  if (!env.is_object()) throw ProtocolError(std::string(kWhat) + ": 'env' is not an object");
  for (auto it = env.begin(); it != env.end(); ++it) {
    if (!it.value().is_string()) throw ProtocolError(std::string(kWhat) + ": env '" + it.key() + "' is not a string");
    o.env.push_back(it.key() + "=" + it.value().get<std::string>());
  }
  o.cwd = field<std::string>(j, "cwd", kWhat);
  return o;
}

std::string format_standby_order(const StandbyOrder& order) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& kv : order.env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;  // execve would pass it; Python's os.environ drops it too
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const nlohmann::json j{{"orig_argv", order.orig_argv},
                         {"module", order.module},
                         {"target", order.target},
                         {"args", order.args},
                         {"env", env},
                         {"cwd", order.cwd}};
  try {
    return j.dump();
  } catch (const nlohmann::json::type_error&) {
    throw ProtocolError("the worker's command line or environment is not UTF-8: a standby cannot take it");
  }
}

}  // namespace meshrun::proto

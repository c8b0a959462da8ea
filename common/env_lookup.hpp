// EnvLookup: how code that reads environment variables gets them, injected so that parsing stays pure
// (tests pass a map; the programs pass process_env).
#pragma once

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

namespace meshrun {

/// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The process's own environment (getenv).
inline std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value ? std::optional<std::string>(value) : std::nullopt;
}

}  // namespace meshrun

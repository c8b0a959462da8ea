// clock_text: a wall-clock instant as people read it in a log line ("14:02:11", local time).
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace meshrun {

/// HH:MM:SS of `unix_ms` (milliseconds since the epoch) in local time.
inline std::string clock_text(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

}  // namespace meshrun

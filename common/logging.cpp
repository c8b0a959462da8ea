#include "common/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace meshrun {

void init_logging(std::string_view component, std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    throw UsageError("unknown log level '" + std::string(level) + "': use trace, debug, info, warn, error or off");
  }
  auto logger = spdlog::stderr_color_mt(std::string(component));
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [" + std::string(component) + "] %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
}

}  // namespace meshrun

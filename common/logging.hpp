// Logging set-up shared by all programs: one spdlog pattern with the component (and rank) in it.
#pragma once

#include <string>
#include <string_view>

namespace meshrun {

/// Configures the default spdlog logger to write to stderr as "[time] [level] [component] msg".
/// `level` is one of trace, debug, info, warn, error, off; throws UsageError otherwise.
void init_logging(std::string_view component, std::string_view level);

}  // namespace meshrun

// The fan-out's environment file, like DeepSpeed's .deepspeed_env: VAR=VALUE lines sent to every host.
// meshrun reads ~/.meshrun_env, then ./.meshrun_env (later files win), then --export VAR (wins over both).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace meshrun::launcher {

/// File name looked up in $HOME and in the current directory.
inline constexpr const char* kEnvFileName = ".meshrun_env";

/// Parses `VAR=VALUE` lines ('#' comments, blank lines, an optional `export ` prefix; the value is taken
/// verbatim up to the end of the line). Throws UsageError naming `source` and the line for bad lines.
std::vector<std::pair<std::string, std::string>> parse_env_file(const std::string& text, const std::string& source);

/// True for a valid shell variable name ([A-Za-z_][A-Za-z0-9_]*).
bool is_env_name(const std::string& name);

}  // namespace meshrun::launcher

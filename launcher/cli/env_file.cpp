#include "launcher/cli/env_file.hpp"

#include <cctype>
#include <sstream>

#include "common/error.hpp"

namespace meshrun::launcher {

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_') return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> parse_env_file(const std::string& text, const std::string& source) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::string body = line.substr(first);
    if (!body.empty() && body.back() == '\r') body.pop_back();
    if (body.rfind("export ", 0) == 0) body = body.substr(body.find_first_not_of(' ', 7));
    const auto eq = body.find('=');
    const std::string name = body.substr(0, eq);
    if (eq == std::string::npos || !is_env_name(name)) {
      throw UsageError(source + ":" + std::to_string(number) + ": expected VAR=VALUE, got '" + line + "'");
    }
    out.emplace_back(name, body.substr(eq + 1));
  }
  return out;
}

}  // namespace meshrun::launcher

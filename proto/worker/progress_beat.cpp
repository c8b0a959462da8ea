#include "proto/worker/progress_beat.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "common/error.hpp"

namespace meshrun::proto {
namespace {

constexpr size_t kMaxPhaseBytes = 32;

[[noreturn]] void reject(std::string_view text, const std::string& why) {
  throw ProtocolError("progress beat '" + std::string(text.substr(0, 80)) + "': " + why +
                      " (format: \"step=N [phase=WORD] [loss=X] [tokens_per_s=X] [compute_s=X]\")");
}

double number(std::string_view text, std::string_view key, std::string_view value) {
  const std::string copy(value);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(v)) {
    reject(text, std::string(key) + "='" + copy + "' is not a finite number");
  }
  return v;
}

bool is_word(std::string_view s) {
  if (s.empty() || s.size() > kMaxPhaseBytes) return false;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

Beat parse_beat(std::string_view text) {
  Beat beat;
  bool has_step = false;
  size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at])) != 0) ++at;
    size_t end = at;
    while (end < text.size() && std::isspace(static_cast<unsigned char>(text[end])) == 0) ++end;
    if (end == at) break;
    const std::string_view field = text.substr(at, end - at);
    at = end;
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) reject(text, "field '" + std::string(field) + "' is not key=value");
    const std::string_view key = field.substr(0, eq);
    const std::string_view value = field.substr(eq + 1);
    if (key == "step") {
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), beat.step);
      if (ec != std::errc() || ptr != value.data() + value.size() || beat.step < 0) {
        reject(text, "step='" + std::string(value) + "' is not an integer >= 0");
      }
      has_step = true;
    } else if (key == "phase") {
      if (!is_word(value)) reject(text, "phase='" + std::string(value) + "' is not a word of up to 32 characters");
      beat.phase = std::string(value);
    } else if (key == "loss") {
      beat.loss = number(text, key, value);
    } else if (key == "tokens_per_s") {
      beat.tokens_per_s = number(text, key, value);
    } else if (key == "compute_s") {
      beat.compute_s = number(text, key, value);
    }  // other keys: ignored (newer scripts, extra metrics)
  }
  if (!has_step) reject(text, "no step=N field");
  return beat;
}

}  // namespace meshrun::proto

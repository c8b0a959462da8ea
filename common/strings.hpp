// Text helpers shared by the command-line parsers and the messages: split, trim, strict number parsing
// and joins. Header-only, std-only.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace meshrun {

/// Every field between separators, empty ones included: split("a,,b", ',') == {"a", "", "b"}.
inline std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    parts.emplace_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

/// Without leading and trailing blanks (spaces and tabs).
inline std::string trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(" \t") - begin + 1));
}

/// The whole text as a decimal integer; nullopt for empty text, trailing characters or overflow.
inline std::optional<int> to_int(std::string_view text) {
  int value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

/// The items with `sep` between them: join({"a", "b"}) == "a, b".
template <typename Range>
std::string join(const Range& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(item)>>) {
      out += std::to_string(item);
    } else {
      out += item;
    }
  }
  return out;
}

}  // namespace meshrun

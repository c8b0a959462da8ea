#include "launcher/hosts/hostlist.hpp"

#include <cctype>

#include "common/error.hpp"

namespace meshrun::launcher {
namespace {

// Upper bound on the expansion: a typo like n[0-99999999] must not eat the memory.
constexpr size_t kMaxHosts = 1 << 20;

[[noreturn]] void bad(const std::string& list, const std::string& why) {
  throw UsageError("hostlist '" + list + "': " + why + " (expected SLURM syntax such as gpu[01-04,07],cpu5)");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!std::isdigit(c)) return false;
  }
  return true;
}

// "01-04,07" -> {"01","02","03","04","07"}, padding each number to the width of its range's lower bound.
std::vector<std::string> expand_range_set(const std::string& list, const std::string& body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t comma = body.find(',', start);
    const std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = item.find('-');
    const std::string lo_text = item.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : item.substr(dash + 1);
    if (!all_digits(lo_text) || !all_digits(hi_text)) bad(list, "'[" + body + "]' holds '" + item + "', not N or N-M");
    if (lo_text.size() > 18 || hi_text.size() > 18) bad(list, "number too large in '" + item + "'");
    const unsigned long long lo = std::stoull(lo_text), hi = std::stoull(hi_text);
    if (lo > hi) bad(list, "range '" + item + "' runs backwards");
    if (hi - lo >= kMaxHosts) bad(list, "range '" + item + "' is too large");
    const size_t width = lo_text.size();
    for (unsigned long long v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(digits);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One host expression without top-level commas: "x-[1-2]-[1-2]".
void expand_item(const std::string& list, const std::string& item, std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  size_t pos = 0;
  while (pos < item.size()) {
    const size_t open = item.find('[', pos);
    const std::string literal = item.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (literal.find(']') != std::string::npos) bad(list, "unbalanced ']' in '" + item + "'");
    for (auto& n : names) n += literal;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) bad(list, "unbalanced '[' in '" + item + "'");
    const auto values = expand_range_set(list, item.substr(open + 1, close - open - 1));
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const auto& n : names) {
      for (const auto& v : values) next.push_back(n + v);
    }
    if (next.size() > kMaxHosts) bad(list, "expands to too many hosts");
    names = std::move(next);
    pos = close + 1;
  }
  out.insert(out.end(), names.begin(), names.end());
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& hostlist) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  const auto flush = [&] {
    // SLURM tolerates whitespace and empty items between commas.
    std::string trimmed;
    for (char c : item) {
      if (!std::isspace(static_cast<unsigned char>(c))) trimmed += c;
    }
    if (!trimmed.empty()) expand_item(hostlist, trimmed, out);
    item.clear();
  };
  for (char c : hostlist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) bad(hostlist, "unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      flush();
    } else {
      item += c;
    }
  }
  if (depth != 0) bad(hostlist, "unbalanced '['");
  flush();
  if (out.size() > kMaxHosts) bad(hostlist, "expands to too many hosts");
  return out;
}

}  // namespace meshrun::launcher

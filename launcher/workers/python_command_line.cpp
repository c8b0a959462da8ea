#include "launcher/workers/python_command_line.hpp"

#include <cctype>
#include <string_view>

namespace meshrun::launcher {
namespace {

// CPython's one-letter options that take no value and leave the run a plain script run.
constexpr std::string_view kPlainLetters = "bBdEIOPqsSuvR";
// Options whose effect a standby cannot reproduce: an interactive prompt, help or version, skipping the first line.
constexpr std::string_view kRefusedLetters = "hiVx?";

std::string_view last_part(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string_view(path) : std::string_view(path).substr(slash + 1);
}

enum class Letters { kPlain, kTakesValue, kRefused };

// One cluster of letters after '-' ("-uB", "-Xdev", "-W", "-m"): what it is, and where a value starts in it.
struct Cluster {
  Letters kind = Letters::kPlain;
  char letter = 0;                // the letter that takes a value or is refused
  std::string_view inline_value;  // "-Xdev": "dev"
};

Cluster read_cluster(std::string_view option) {
  for (size_t i = 1; i < option.size(); ++i) {
    const char c = option[i];
    if (c == 'W' || c == 'X' || c == 'm' || c == 'c') {
      return {Letters::kTakesValue, c, option.substr(i + 1)};
    }
    if (kRefusedLetters.find(c) != std::string_view::npos || kPlainLetters.find(c) == std::string_view::npos) {
      return {Letters::kRefused, c, {}};
    }
  }
  return {};
}

}  // namespace

bool is_python_interpreter(const std::string& entrypoint) {
  std::string_view name = last_part(entrypoint);
  if (name.substr(0, 6) != "python") return false;
  name.remove_prefix(6);
  if (name.empty()) return true;
  bool dot_seen = false;
  bool digit_last = false;
  for (const char c : name) {
    if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      digit_last = true;
    } else if (c == '.' && digit_last && !dot_seen) {
      dot_seen = true;
      digit_last = false;
    } else {
      return false;
    }
  }
  return digit_last;
}

std::variant<PythonRun, NotAScriptRun> read_interpreter_args(const std::vector<std::string>& args) {
  PythonRun run;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& a = args[i];
    if (a == "-" || a.empty()) return NotAScriptRun{"the interpreter reads its script from stdin"};
    if (a == "--") {
      ++i;
      break;
    }
    if (a.rfind("--check-hash-based-pycs", 0) == 0) {
      run.flags.push_back(a);
      if (a.find('=') == std::string::npos) {
        if (++i == args.size()) return NotAScriptRun{"--check-hash-based-pycs has no value"};
        run.flags.push_back(args[i]);
      }
      ++i;
      continue;
    }
    if (a[0] != '-') break;
    if (a.rfind("--", 0) == 0) return NotAScriptRun{"the interpreter's option " + a + " is not one meshrun mirrors"};
    const Cluster cluster = read_cluster(a);
    if (cluster.kind == Letters::kRefused) {
      return NotAScriptRun{std::string("the interpreter's option -") + cluster.letter + " runs no plain script"};
    }
    if (cluster.kind == Letters::kPlain) {
      run.flags.push_back(a);
      ++i;
      continue;
    }
    if (cluster.letter == 'c') return NotAScriptRun{"the interpreter runs a command (-c), not a script"};
    // -W / -X / -m: the value follows in the same word or in the next one.
    std::string head = a.substr(0, a.size() - cluster.inline_value.size());
    std::string value(cluster.inline_value);
    if (value.empty()) {
      if (++i == args.size())
        return NotAScriptRun{"the interpreter's -" + std::string(1, cluster.letter) + " has no value"};
      value = args[i];
    }
    ++i;
    if (cluster.letter == 'm') {
      if (head != "-m") run.flags.push_back(head.substr(0, head.size() - 1));  // "-um": "-u", then -m
      run.module = true;
      run.target = value;
      run.args.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      return run;
    }
    run.flags.push_back(head + value);
  }
  if (i == args.size()) return NotAScriptRun{"the interpreter is given no script"};
  if (args[i] == "-") return NotAScriptRun{"the interpreter reads its script from stdin"};
  run.target = args[i];
  run.args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return run;
}

}  // namespace meshrun::launcher

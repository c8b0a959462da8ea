// CheckReport: the outcome of `meshrun check`, one CheckResult per check, printed either as lines
//   PASS|WARN|FAIL name: detail (hint)
// followed by a verdict line, or as one JSON document (fields listed in README.md (troubleshooting)).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshrun::diagnostics {

enum class CheckStatus { kPass, kWarn, kFail };

/// "PASS", "WARN" or "FAIL".
const char* status_name(CheckStatus status);

struct CheckResult {
  CheckStatus status = CheckStatus::kPass;
  std::string name;                                // stable dotted id, e.g. "endpoint.tcp", "rdzv.duplicates"
  std::string detail;                              // what was found
  std::string hint;                                // what to do about it; empty when nothing
  nlohmann::json data = nlohmann::json::object();  // machine-readable facts behind the detail
  double elapsed_ms = 0;
  std::string table;  // lines printed under the check's line (the bandwidth matrix); --json has them in data
};

/// One check's outcome (shared by every check family).
inline CheckResult make_result(CheckStatus status, std::string name, std::string detail, std::string hint = {}) {
  CheckResult r;
  r.status = status;
  r.name = std::move(name);
  r.detail = std::move(detail);
  r.hint = std::move(hint);
  return r;
}

class CheckReport {
 public:
  void add(CheckResult result) { results_.push_back(std::move(result)); }
  const std::vector<CheckResult>& results() const { return results_; }

  int count(CheckStatus status) const;
  /// FAIL if any check failed, else WARN if any warned, else PASS.
  CheckStatus verdict() const;
  /// 1 when any check failed, else 0.
  int exit_code() const { return count(CheckStatus::kFail) > 0 ? 1 : 0; }
  /// The first result with `name`, or nullptr.
  const CheckResult* find(const std::string& name) const;

  /// One line per check, then "verdict: ...".
  std::string to_text() const;
  nlohmann::json to_json() const;

 private:
  std::vector<CheckResult> results_;
};

}  // namespace meshrun::diagnostics

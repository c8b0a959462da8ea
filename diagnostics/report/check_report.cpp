#include "diagnostics/report/check_report.hpp"

#include <algorithm>
#include <sstream>

#include "common/strings.hpp"
#include "common/version.hpp"

namespace meshrun::diagnostics {

const char* status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass: return "PASS";
    case CheckStatus::kWarn: return "WARN";
    case CheckStatus::kFail: return "FAIL";
  }
  return "FAIL";
}

int CheckReport::count(CheckStatus status) const {
  return static_cast<int>(
      std::count_if(results_.begin(), results_.end(), [&](const CheckResult& r) { return r.status == status; }));
}

CheckStatus CheckReport::verdict() const {
  if (count(CheckStatus::kFail) > 0) return CheckStatus::kFail;
  if (count(CheckStatus::kWarn) > 0) return CheckStatus::kWarn;
  return CheckStatus::kPass;
}

const CheckResult* CheckReport::find(const std::string& name) const {
  for (const auto& r : results_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string CheckReport::to_text() const {
  std::ostringstream out;
  for (const auto& r : results_) {
    out << status_name(r.status) << " " << r.name << ": " << r.detail;
    if (!r.hint.empty()) out << " (" << r.hint << ")";
    out << "\n" << r.table;
  }
  const int fails = count(CheckStatus::kFail);
  const int warns = count(CheckStatus::kWarn);
  out << "verdict: " << status_name(verdict()) << ": " << results_.size() << " checks, " << fails << " failed, "
      << warns << " warned";
  if (fails > 0) {
    std::vector<std::string> names;
    for (const auto& r : results_) {
      if (r.status == CheckStatus::kFail) names.push_back(r.name);
    }
    out << " (fix first: " << join(names) << ")";
  }
  out << "\n";
  return out.str();
}

nlohmann::json CheckReport::to_json() const {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : results_) {
    checks.push_back({{"name", r.name},
                      {"status", status_name(r.status)},
                      {"detail", r.detail},
                      {"hint", r.hint},
                      {"elapsed_ms", r.elapsed_ms},
                      {"data", r.data}});
  }
  return {
      {"meshrun_version", kVersion},
      {"verdict", status_name(verdict())},
      {"exit_code", exit_code()},
      {"counts",
       {{"pass", count(CheckStatus::kPass)}, {"warn", count(CheckStatus::kWarn)}, {"fail", count(CheckStatus::kFail)}}},
      {"checks", checks}};
}

}  // namespace meshrun::diagnostics
